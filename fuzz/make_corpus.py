#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz harnesses into fuzz/corpus/{plan,run,npy,cache,merge}/.

Each seed is the encoding of a meaningful input in the harness's own format (see the decoders in
fuzz_plan.c, fuzz_run.c, fuzz_cache.c and fuzz_merge.c), so that fuzzing starts from real problems
rather than from zeros.
Run it again after changing a decoder: python3 fuzz/make_corpus.py
"""
import hashlib
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# -- fuzz_plan: take_int / take_enum / take_scale / take_lengths ------------------------------

EDGES = [0, 1, -1, 2, 3, 7, 8, 16, 63, 64, 65, 128, 576, 577, 1023, 1024, 1025, 4096, 4097,
         65535, 65536, 65537, 1 << 24, (1 << 24) + 1, 2**31 - 1, 2**31, -2**31, 2**32 - 1,
         1 << 40, (2**63 - 1) // 2, 2**63 - 1, -2**63, -2]


def p_int(value, small_max):
    """take_int(in, small_max) decoding to value."""
    span = small_max + 2
    if -1 <= value <= small_max:
        if span <= 256:
            return bytes([0, value + 1])
        return bytes([0]) + struct.pack("<I", value + 1)
    if value in EDGES:
        return bytes([4, EDGES.index(value)])
    if 0 <= value <= 0xffff:
        return bytes([6]) + struct.pack("<I", value)
    return bytes([7]) + struct.pack("<q", value)


def p_enum(value, count=3):
    """take_enum(in, count) decoding to value."""
    return bytes([value]) if 0 <= value < count else bytes([240]) + struct.pack("<i", value)


def p_lengths(values, prefix=False):
    """take_lengths: mode byte (raw when >= 224), then per entry a selector and a value."""
    out = bytearray([224 if prefix else 0])  # raw for prefix sums: the values are given as is
    for v in values:
        if 0 <= v <= 64:
            out += bytes([0, v])
        else:
            out += bytes([230]) + struct.pack("<i", v)
    return bytes(out)


def plan_seed(batch=1, heads_q=8, heads_kv=2, seq_q=16, seq_kv=64, head_dim=64, head_dim_v=0,
              dtypes=(0, 1, 1, 0), scale=None, causal=0, window=(-1, -1), mask=0, split=0,
              workers=4, threads=1, tiles=(0, 0), paged=None, seqlens_q=None, cu_q=None,
              seqlens_kv=None, cu_kv=None, how=0):
    out = bytearray()
    out += p_int(batch, 6) + p_int(heads_kv, 8)
    group = heads_q // heads_kv
    out += p_int(group, 70) + bytes([0])  # heads_q = heads_kv * group
    out += p_int(seq_q, 40) + p_int(seq_kv, 300)
    out += p_int(head_dim, 130) + p_int(head_dim_v, 130)
    for d in dtypes:
        out += p_enum(d)
    out += bytes([0]) if scale is None else bytes([160, (scale + 64) % 129])
    out += p_enum(causal) + p_int(window[0], 40) + p_int(window[1], 40)
    out += p_enum(mask, 4) + p_enum(split)
    out += p_int(workers, 20) + p_int(threads, 4) + p_int(tiles[0], 9) + p_int(tiles[1], 70)
    if paged:
        out += bytes([0]) + p_int(paged[0], 20) + p_int(paged[1], 40) + p_int(paged[2], 12)
        out += p_enum(paged[3] if len(paged) > 3 else 0, 2)
    else:
        out += bytes([200])
    flags = ((1 if seqlens_q else 0) | (2 if cu_q else 0) | (4 if seqlens_kv else 0) |
             (8 if cu_kv else 0))
    if paged and not seqlens_kv:
        flags |= 16
    out += bytes([flags])
    if seqlens_q:
        out += p_lengths(seqlens_q)
    if cu_q:
        out += p_lengths(cu_q, prefix=True)
    if seqlens_kv:
        out += p_lengths(seqlens_kv)
    if cu_kv:
        out += p_lengths(cu_kv, prefix=True)
    out += bytes([how])
    return bytes(out)


PLAN = [
    plan_seed(),
    plan_seed(batch=1, heads_q=32, heads_kv=8, seq_q=2048, seq_kv=2048, head_dim=128, causal=1,
              workers=2, threads=0),
    plan_seed(batch=4, heads_q=32, heads_kv=8, seq_q=1, seq_kv=0, head_dim=128, workers=8,
              paged=(16, 40, 12, 1), seqlens_kv=[100, 17, 0, 64]),
    plan_seed(batch=3, heads_q=4, heads_kv=4, seq_q=30, seq_kv=90, head_dim=64,
              cu_q=[0, 10, 10, 30], cu_kv=[0, 40, 41, 90], causal=2, window=(8, -1)),
    plan_seed(batch=2, heads_q=6, heads_kv=2, seq_q=9, seq_kv=40, seqlens_q=[9, 3],
              seqlens_kv=[40, 0], mask=3, split=2, workers=1024, tiles=(3, 17)),
    plan_seed(batch=1, heads_q=130, heads_kv=2, seq_q=1, seq_kv=300, head_dim=576,
              head_dim_v=512, split=1, workers=7),
    plan_seed(batch=2, heads_q=2, heads_kv=1, seq_q=40, seq_kv=5, dtypes=(2, 2, 0, 1),
              scale=-32, causal=1, window=(3, 2), workers=0, threads=3),
    plan_seed(batch=2**63 - 1, heads_q=1, heads_kv=1, seq_q=1, seq_kv=1, head_dim=1),
    plan_seed(batch=1, heads_q=1, heads_kv=1, seq_q=2**31 - 1, seq_kv=2**31 - 1, head_dim=1,
              tiles=(4096, 4096), workers=1024),
    plan_seed(batch=2, heads_q=8, heads_kv=2, dtypes=(0, 3, 1, 7), how=0),
    plan_seed(batch=1, seq_q=8, seq_kv=8, how=255),
    plan_seed(batch=1, seq_q=8, seq_kv=8, how=254),
]

# -- fuzz_run: one byte per field, then the seed -----------------------------------------------

RUN_FIELDS = ["batch", "heads_kv", "group", "seq_q", "seq_kv", "dim_kind", "dim", "dim_v_same",
              "dim_v_kind", "dim_v", "q_dtype", "k_dtype", "v_dtype", "o_dtype", "causal",
              "window_left", "window_right", "mask_kind", "mask_shape", "mask_density", "q_lens",
              "kv_lens", "page_size", "layout", "packed_extra", "workers", "threads", "tile_q",
              "tile_kv", "split", "lse", "scale", "amplitude", "explicit_lens", "lens_q0",
              "lens_q1", "lens_q2", "lens_q3", "lens_kv0", "lens_kv1", "lens_kv2", "lens_kv3",
              "ws_offset", "isa", "pool", "trust_table", "bad_entry", "bad_batch", "bad_page",
              "bad_value", "poison"]


def run_seed(seed, **fields):
    """Byte values for the fields given in decoded terms where that is simple."""
    values = dict.fromkeys(RUN_FIELDS, 0)
    values.update(batch=1, heads_kv=0, group=1, seq_q=5, seq_kv=20, dim=15, lse=1, isa=4, pool=2,
                  window_left=0, window_right=0, bad_entry=255, poison=255)  # window -1: any
    for k, v in fields.items():
        if k == "heads_kv":
            v = v - 1
        elif k == "group":
            v = v - 1 if v <= 4 else (241 if v == 16 else 240)
        elif k in ("window_left", "window_right"):
            v = v + 1
        elif k == "dim":
            v = v - 1 if v <= 40 else [48, 63, 64, 65, 80, 96, 128, 256, 512, 576].index(v)
            values["dim_kind"] = 0 if fields["dim"] <= 40 else 200
        elif k == "dim_v":
            values["dim_v_same"] = 128
            values["dim_v_kind"] = 0 if v <= 40 else 200
            v = v - 1 if v <= 40 else [48, 63, 64, 65, 80, 96, 128, 256, 512, 576].index(v)
        elif k == "page_size":
            v = v - 1
        elif k == "tile_q":
            v = 0 if v == 0 else 160 + (v - 1 - 160) % 9
        elif k == "tile_kv":
            v = 0 if v == 0 else 160 + (v - 1 - 160) % 70
        elif k == "workers":
            v = 250 if v == 1024 else v
        values[k] = v
    return bytes(values[k] % 256 for k in RUN_FIELDS) + struct.pack("<Q", seed)


RUN = [
    run_seed(1),
    # prefill, causal bottom-right and top-left, GQA
    run_seed(2, batch=2, heads_kv=2, group=4, seq_q=17, seq_kv=40, dim=32, causal=1, workers=3),
    run_seed(3, batch=1, heads_kv=1, group=2, seq_q=20, seq_kv=20, dim=64, causal=2,
             window_left=5, workers=2, threads=2),
    # decode over a paged cache with explicit lengths, split-KV across many workers
    run_seed(4, batch=3, heads_kv=2, group=4, seq_q=1, seq_kv=90, dim=64, kv_lens=3, page_size=7,
             explicit_lens=2, lens_kv0=90, lens_kv1=13, lens_kv2=0, workers=16, threads=2),
    run_seed(5, batch=1, heads_kv=1, group=16, seq_q=1, seq_kv=90, dim=128, kv_lens=3,
             page_size=16, workers=1024),
    # packed batches with empty sequences and padding rows
    run_seed(6, batch=4, heads_kv=1, group=1, seq_q=9, seq_kv=30, dim=8, q_lens=2, kv_lens=2,
             explicit_lens=3, lens_q0=0, lens_q1=9, lens_q2=4, lens_q3=1, lens_kv0=5,
             lens_kv1=0, lens_kv2=30, lens_kv3=2, packed_extra=3),
    # every mask kind and shape
    run_seed(7, batch=2, heads_kv=2, group=2, seq_q=6, seq_kv=33, dim=16, mask_kind=1,
             mask_shape=2, mask_density=30),
    run_seed(8, batch=2, heads_kv=1, group=3, seq_q=6, seq_kv=33, dim=16, mask_kind=2,
             mask_shape=4, mask_density=60, causal=1),
    run_seed(9, batch=1, heads_kv=1, group=2, seq_q=11, seq_kv=70, dim=24, mask_kind=3,
             mask_shape=0, mask_density=100),
    # dtypes and output saturation, head dims past the vector width
    run_seed(10, batch=1, heads_kv=1, group=1, seq_q=3, seq_kv=10, dim=576, dim_v=512,
             q_dtype=1, k_dtype=2, v_dtype=1, o_dtype=1),
    run_seed(11, batch=2, heads_kv=3, group=1, seq_q=7, seq_kv=19, dim=65, dim_v=33, q_dtype=2,
             k_dtype=0, v_dtype=2, o_dtype=2, layout=131),
    # large GQA group sliced into units, tiles overridden, strategies
    run_seed(12, batch=1, heads_kv=1, group=65, seq_q=2, seq_kv=12, dim=8, tile_q=2, tile_kv=5,
             split=1, workers=5),
    run_seed(13, batch=2, heads_kv=1, group=2, seq_q=20, seq_kv=60, dim=12, tile_q=3, tile_kv=7,
             split=2, workers=6, ws_offset=17, isa=0),
    run_seed(14, batch=2, heads_kv=2, group=2, seq_q=8, seq_kv=50, dim=40, isa=1, pool=1,
             scale=250, amplitude=3),
    run_seed(15, batch=1, heads_kv=2, group=2, seq_q=8, seq_kv=50, dim=40, isa=2, pool=0,
             causal=1, window_left=3, window_right=2),
    # a trusted block table; one entry out of the pool, reached by a length or not
    run_seed(16, batch=2, heads_kv=1, group=2, seq_q=1, seq_kv=60, dim=16, kv_lens=3,
             page_size=8, trust_table=1),
    run_seed(17, batch=3, heads_kv=1, group=1, seq_q=2, seq_kv=60, dim=16, kv_lens=3,
             page_size=5, explicit_lens=2, lens_kv0=60, lens_kv1=3, lens_kv2=0, bad_entry=0,
             bad_batch=0, bad_page=4, bad_value=3),
    run_seed(18, batch=2, heads_kv=1, group=1, seq_q=2, seq_kv=60, dim=16, kv_lens=3,
             page_size=5, explicit_lens=2, lens_kv0=7, lens_kv1=60, bad_entry=0, bad_batch=0,
             bad_page=5, bad_value=2),
    # NaN and Inf in K and V wherever no row looks: causal, windows, masks, decode
    run_seed(19, batch=2, heads_kv=2, group=2, seq_q=9, seq_kv=50, dim=16, causal=2,
             window_left=6, poison=0, tile_kv=16),
    run_seed(20, batch=2, heads_kv=1, group=4, seq_q=1, seq_kv=80, dim=32, mask_kind=1,
             mask_shape=2, mask_density=60, kv_lens=3, page_size=16, poison=0, workers=9),
    run_seed(21, batch=3, heads_kv=1, group=2, seq_q=12, seq_kv=70, dim=24, mask_kind=3,
             mask_shape=4, mask_density=40, causal=1, q_lens=2, kv_lens=2, poison=0),
]

# -- fuzz_cache: one byte per field, then the seed ---------------------------------------------

CACHE_FIELDS = ["tokens", "heads", "dim", "blocks", "block_rows", "src_dtype", "cache_dtype",
                "src_layout", "src_a", "src_b", "cache_layout", "cache_a", "cache_b", "cache_c",
                "dim_stride", "scale_mode", "scale_a", "scale_b", "scale_c", "fixed_kind",
                "fixed_bad", "skip", "bad_slot", "bad_slot_at", "values", "special", "nulls",
                "pool", "big"]
WIDE_CACHE_DIMS = [48, 64, 96, 128, 256, 576, 577, 0]
F32, F16, BF16, I8, E4M3, E5M2 = range(6)
SRC = dict(dense=0, head_major=1, padded=2, raw=3, negative=4, overflow=5, in_cache=6,
           past_cache=7)
CACHE = dict(dense=0, head_major=1, padded=2, offset=3, raw=4, shared=5, negative=6, overflow=7)
SCALE = dict(dense=0, head_major=1, padded=2, fixed_heads=3, fixed_one=4, past_src=5, raw=6,
             null=7, data_null=8, ambiguous=9, negative=10, in_cache=11, shared=12, overflow=13)
# fixed scales (fixed_kind): 0 log-uniform in [2^-8, 2^8], 1 one, 2 1e-30, 3 the smallest
# subnormal, 4 1e30, 5 any binade, 6 1 / qmax, 7 FLT_MIN. Values: 0 [-1, 1], 1 +-7e4, 2 f32
# subnormals, 3 any binade, 4 near FLT_MAX, 5 zeros, 6 halves, 7 a distribution per row.
SLOT_BAD = dict(repeat=0, rows=1, rows_plus_3=2, minus_2=3, int64_min=4, int64_max=5, last=6)


def cache_seed(seed, src_layout="dense", cache_layout="dense", scale="null", bad_slot=None,
               **fields):
    """Field values in decoded terms: tokens, heads, dim, blocks, block_rows, dtypes, modes."""
    values = dict.fromkeys(CACHE_FIELDS, 0)
    values.update(fixed_bad=255, special=255)  # none
    fields = dict(dict(tokens=4, heads=2, dim=16, blocks=2, block_rows=4), **fields)
    values["src_layout"] = SRC[src_layout]
    values["cache_layout"] = CACHE[cache_layout]
    values["scale_mode"] = SCALE[scale]
    if bad_slot is not None:
        values["bad_slot"] = 160 + SLOT_BAD[bad_slot]
    for k, v in fields.items():
        if k in ("heads", "block_rows"):
            v = v - 1
        elif k == "dim":
            v = v - 1 if 1 <= v <= 40 else 200 + WIDE_CACHE_DIMS.index(v)
        values[k] = v
    return bytes(values[k] % 256 for k in CACHE_FIELDS) + struct.pack("<Q", seed)


CACHE_SEEDS = [
    # decode: one token per sequence into a paged f16 cache
    cache_seed(1, tokens=4, heads=4, dim=64, blocks=4, block_rows=4, src_dtype=F16,
               cache_dtype=F16),
    # prefill into a dense cache, f32 to bf16, and vLLM's head-major value cache with padding
    cache_seed(2, tokens=8, heads=2, dim=40, blocks=1, block_rows=8, src_dtype=F32,
               cache_dtype=BF16),
    cache_seed(3, tokens=6, heads=3, dim=24, blocks=3, block_rows=4, src_dtype=BF16,
               cache_dtype=F16, cache_layout="head_major", skip=128 + 0b0100101),
    # quantized caches with per-token scales, in each scale layout
    cache_seed(4, tokens=5, heads=2, dim=32, blocks=2, block_rows=4, cache_dtype=I8,
               scale="dense"),
    cache_seed(5, tokens=3, heads=4, dim=16, blocks=3, block_rows=2, src_dtype=BF16,
               cache_dtype=E4M3, scale="head_major", src_layout="head_major"),
    cache_seed(6, tokens=4, heads=2, dim=20, blocks=2, block_rows=5, src_dtype=F16,
               cache_dtype=E5M2, scale="padded", scale_a=1, scale_b=2, scale_c=1,
               cache_layout="padded", cache_a=3, cache_b=5, cache_c=7),
    # fixed scales: per head, one for all (ties of int8 and e4m3), saturation
    cache_seed(7, tokens=4, heads=3, dim=8, blocks=2, block_rows=4, src_dtype=F16,
               cache_dtype=E5M2, scale="fixed_heads", fixed_kind=0),
    cache_seed(8, tokens=4, heads=2, dim=12, blocks=1, block_rows=6, cache_dtype=I8,
               scale="fixed_one", fixed_kind=1, values=6),
    cache_seed(9, tokens=2, heads=2, dim=12, blocks=2, block_rows=2, cache_dtype=E4M3,
               scale="fixed_heads", fixed_kind=6, values=1),
    # f16 saturation, NaN and Inf into unquantized caches; tiny rows and rows of zeros
    cache_seed(10, tokens=3, heads=2, dim=16, blocks=2, block_rows=2, cache_dtype=F16,
               values=1, special=4),  # four values, the first NaN
    cache_seed(11, tokens=3, heads=2, dim=16, blocks=2, block_rows=2, cache_dtype=E4M3,
               scale="dense", values=2),
    cache_seed(12, tokens=3, heads=2, dim=16, blocks=2, block_rows=2, cache_dtype=I8,
               scale="dense", values=7),
    # refused: NaN for a quantized cache, repeated and out-of-range slots, rows in one place, a
    # source or scales on the cache, ambiguous, negative and overflowing strides, a bad fixed
    # scale, a missing scale, a scale for an f32 cache, NULL slots, a bad dtype
    cache_seed(13, tokens=3, heads=2, dim=8, cache_dtype=I8, scale="dense", special=1),
    cache_seed(14, tokens=4, heads=2, dim=8, bad_slot="repeat", bad_slot_at=1),
    cache_seed(15, tokens=4, heads=2, dim=8, bad_slot="rows", bad_slot_at=2),
    cache_seed(16, tokens=4, heads=2, dim=8, blocks=2, block_rows=4, cache_layout="shared",
               cache_a=1, cache_b=3),
    cache_seed(17, tokens=4, heads=2, dim=8, src_layout="in_cache", src_a=4),
    cache_seed(18, tokens=4, heads=2, dim=8, cache_dtype=E4M3, scale="in_cache", scale_a=2),
    cache_seed(19, tokens=4, heads=2, dim=8, cache_dtype=I8, scale="ambiguous"),
    cache_seed(20, tokens=4, heads=2, dim=8, cache_layout="negative", cache_a=1, cache_b=0),
    cache_seed(21, tokens=4, heads=2, dim=8, cache_layout="overflow", cache_a=2, cache_b=0),
    cache_seed(22, tokens=4, heads=2, dim=8, cache_dtype=I8, scale="fixed_heads",
               fixed_bad=16 * 3 + 1),
    cache_seed(23, tokens=4, heads=2, dim=8, cache_dtype=E5M2, scale="null"),
    cache_seed(24, tokens=4, heads=2, dim=8, scale_mode=240),
    cache_seed(25, tokens=4, heads=2, dim=8, nulls=242),
    cache_seed(26, tokens=4, heads=2, dim=8, src_dtype=240),  # int8
    # apart in memory: a source just past the cache, scales just past the source, an offset
    # cache; strides given as numbers (heads outside rows in each block), every head reading
    # one source row (stride_head 0)
    cache_seed(27, tokens=4, heads=2, dim=8, cache_dtype=I8, scale="past_src",
               src_layout="past_cache", cache_layout="offset", cache_b=5),
    cache_seed(28, tokens=4, heads=2, dim=4, blocks=2, block_rows=3, cache_layout="raw",
               cache_a=2 * 1, cache_b=2 * 4 + 1, cache_c=2 * 3, src_layout="raw", src_a=0,
               src_b=2),
    # 2^16 elements on 2 threads
    cache_seed(29, big=255, cache_dtype=I8, scale="dense", pool=1),
]

# -- fuzz_merge: one byte per field (per part where four), then the seed -----------------------

MERGE_FIELDS = (["count", "batch", "seq", "heads", "head_dim", "out_dtype"] +
                ["part_dtype%d" % p for p in range(4)] + ["part_layout%d" % p for p in range(4)] +
                ["part_arg%d" % p for p in range(4)] + ["lse_layout%d" % p for p in range(4)] +
                ["lse_kind%d" % p for p in range(4)] +
                ["lse_base", "o_kind", "o_special", "out_mode", "out_a", "out_b", "lse_out_mode",
                 "lse_out_a", "in_place", "nulls", "sink_kind", "sink_bad"])
WIDE_MERGE_DIMS = [32, 64, 128, 576, 577, 0, 512, -1]
PART = dict(dense=0, head_major=1, padded=2, raw=3, repeat=4, negative=5, stride_dim=6,
            data_null=7, overflow=8)
LSE = dict(bsh=0, bhs=1, raw=2, negative=3, f16=4, data_null=5)
OUT = dict(dense=0, head_major=1, padded=2, raw=3, in_place=4, overlap=5, negative=6,
           stride_dim=7, data_null=8, null=9, overflow=10)
LSE_OUT = dict(bsh=0, bhs=1, raw=2, data_null=3, in_place=4, overlap=5, negative=6, null=7, f16=8)
# each part's LSE around its row's base (lse_kind): 0 +-3, 1 -inf, 2 half -inf, 3 some NaN,
# 4 some +inf, 5 equal, 6 +-(100..1100), 7 huge. Bases: 0 [-10, 10], 1 huge, 2 tiny, 3 2^20..2^60.
# O values: 0 [-2, 2], 1 2^13..2^17, 2 huge, 3 subnormal, 4 any binade. Sinks: 0 [-5, 5], 1 -inf,
# 2 near the LSE, 3 half -inf, 4 huge, 5 equal to the LSE.


def merge_seed(seed, count=2, parts=(), lses=(), out="dense", lse_out="bsh", sink_bad=255,
               **fields):
    values = dict.fromkeys(MERGE_FIELDS, 0)
    values.update(o_special=255)  # none
    fields = dict(dict(batch=1, seq=2, heads=2, head_dim=8), **fields)
    values["count"] = count - 1 if count >= 1 else 252 - count  # 0 and -1 from 252, 253
    values["out_mode"] = OUT[out]
    values["lse_out_mode"] = LSE_OUT[lse_out]
    values["sink_bad"] = sink_bad
    for p, (dtype, layout, arg) in enumerate(parts):
        values["part_dtype%d" % p] = dtype
        values["part_layout%d" % p] = PART[layout]
        values["part_arg%d" % p] = arg
    for p, (layout, kind) in enumerate(lses):
        values["lse_layout%d" % p] = LSE[layout]
        values["lse_kind%d" % p] = kind
    for k, v in fields.items():
        if k == "head_dim":
            v = v - 1 if 1 <= v <= 24 else 200 + WIDE_MERGE_DIMS.index(v)
        values[k] = v
    return bytes(values[k] % 256 for k in MERGE_FIELDS) + struct.pack("<Q", seed)


MERGE_SEEDS = [
    # two f32 parts, the layouts fai_run writes
    merge_seed(1, parts=[(F32, "dense", 0)] * 2, lses=[("bsh", 0)] * 2),
    merge_seed(2, count=3, batch=2, seq=3, heads=3, head_dim=128, out_dtype=BF16,
               parts=[(F16, "dense", 0), (BF16, "head_major", 0), (F32, "padded", 0x4b)],
               lses=[("bhs", 0), ("bhs", 0), ("bsh", 0)], lse_out="bhs"),
    # a running result absorbing the next part in place
    merge_seed(3, parts=[(F32, "dense", 0), (F16, "dense", 0)], lses=[("bsh", 0)] * 2,
               out="in_place", lse_out="in_place", in_place=0),
    # every part -inf; NaN and +inf parts; equal huge LSEs; underflowing weights with Inf in O
    merge_seed(4, parts=[(F32, "dense", 0)] * 2, lses=[("bsh", 1)] * 2, o_special=2),
    merge_seed(5, count=3, parts=[(F16, "dense", 0)] * 3, lses=[("bsh", 3), ("bsh", 4),
                                                                 ("bsh", 0)]),
    merge_seed(6, count=4, parts=[(F32, "dense", 0)] * 4, lses=[("bsh", 5)] * 4, lse_base=1),
    merge_seed(7, parts=[(BF16, "dense", 0), (F32, "dense", 0)], lses=[("bsh", 6), ("bsh", 0)],
               o_special=3),
    # f16 output past its range; tiny LSEs and subnormal O
    merge_seed(8, parts=[(F32, "dense", 0)] * 2, lses=[("bsh", 5)] * 2, out_dtype=F16, o_kind=1),
    merge_seed(9, parts=[(F32, "dense", 0)] * 2, lses=[("bsh", 0)] * 2, lse_base=2, o_kind=3),
    # no LSE output; broadcast parts; an output whose rows overlap; an output over a part
    merge_seed(10, parts=[(F32, "dense", 0)] * 2, lses=[("bsh", 0)] * 2, lse_out="data_null"),
    merge_seed(11, parts=[(F32, "raw", 0x11), (F16, "repeat", 0)], lses=[("raw", 0x05)] * 2),
    merge_seed(12, parts=[(F32, "dense", 0)] * 2, lses=[("bsh", 0)] * 2, out="raw", out_a=0x13),
    merge_seed(13, parts=[(F32, "dense", 0)] * 2, lses=[("bsh", 0)] * 2, out="overlap", out_a=3),
    # refused: negative strides, stride_dim, dtypes, NULLs, offsets past int64, no parts
    merge_seed(14, parts=[(F32, "negative", 1), (F32, "dense", 0)], lses=[("bsh", 0)] * 2),
    merge_seed(15, parts=[(F32, "dense", 0)] * 2, lses=[("f16", 0), ("bsh", 0)]),
    merge_seed(16, parts=[(F32, "stride_dim", 0), (240, "dense", 0)], lses=[("bsh", 0)] * 2),
    merge_seed(17, parts=[(F32, "dense", 0)] * 2, lses=[("bsh", 0)] * 2, out="data_null"),
    merge_seed(18, parts=[(F32, "overflow", 1)] * 2, lses=[("bsh", 0)] * 2),
    merge_seed(19, parts=[(F32, "dense", 0)] * 2, lses=[("bsh", 0)] * 2, nulls=241),
    merge_seed(20, count=0, parts=[(F32, "dense", 0)], lses=[("bsh", 0)]),
    # the sinks: near the LSE, none (-inf), some, NaN (refused), NULL (refused)
    merge_seed(21, parts=[(F32, "dense", 0)] * 2, lses=[("bsh", 0)] * 2, sink_kind=2),
    merge_seed(22, parts=[(F16, "dense", 0)] * 2, lses=[("bsh", 2)] * 2, sink_kind=3,
               out_dtype=F16),
    merge_seed(23, parts=[(F32, "dense", 0)] * 2, lses=[("bsh", 0)] * 2, sink_bad=32),
    merge_seed(24, parts=[(F32, "dense", 0)] * 2, lses=[("bsh", 0)] * 2, sink_bad=64),
    # the largest head dimension, four parts
    merge_seed(25, count=4, batch=2, seq=3, heads=3, head_dim=576,
               parts=[(F32, "dense", 0), (F16, "dense", 0), (BF16, "dense", 0),
                      (F32, "head_major", 0)], lses=[("bsh", 0), ("bsh", 2), ("bsh", 6),
                                                      ("bsh", 0)]),
]

# -- fuzz_npy: .npy files ----------------------------------------------------------------------


def npy(descr, shape, payload, version=1, fortran=False, extra=b""):
    shape_text = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False", shape_text)
    pre = 10 if version == 1 else 12
    total = (pre + len(header) + 1 + 63) // 64 * 64
    header = (header + " " * (total - pre - len(header) - 1) + "\n").encode("latin-1")
    size = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + size + header + payload + extra


NPY = [
    npy("<f4", (2, 3), struct.pack("<6f", 1, 2, 3, 4, 5, 6)),
    npy("<f2", (1, 2, 1, 2), bytes(8), version=2),
    npy("<u2", (3,), bytes(6), version=3),
    npy("|b1", (2, 2), bytes([1, 0, 0, 1])),
    npy("|u1", (4,), bytes([0, 1, 2, 255])),
    npy("<i4", (2,), struct.pack("<2i", 7, -1), extra=b"trailing"),
    npy("<f4", (), struct.pack("<f", 0.5)),
    npy("<f4", (0, 5), b""),
    npy("<f4", (1, 1, 1, 1, 1, 1, 1, 1), struct.pack("<f", 1)),
    npy("<f4", (2,), bytes(8), fortran=True),
    npy(">f4", (2,), bytes(8)),
]


def write(kind, items):
    d = os.path.join(HERE, "corpus", kind)
    os.makedirs(d, exist_ok=True)
    for name in os.listdir(d):
        os.remove(os.path.join(d, name))
    for data in items:
        with open(os.path.join(d, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    write("plan", PLAN)
    write("run", RUN)
    write("npy", NPY)
    write("cache", CACHE_SEEDS)
    write("merge", MERGE_SEEDS)
