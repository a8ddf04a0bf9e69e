#!/usr/bin/env python3
"""End-to-end test of `fai run` against a float64 numpy reference.

Usage: python3 test_run_numpy.py /path/to/fai

Seeded random cases cover f32/f16/bf16 inputs and outputs, quantized K and V (int8 codes, and
fp8 e4m3 / e5m2 codes as uint8 bytes with --k-dtype / --v-dtype, with --k-scale / --v-scale
per token, per kv head and per tensor), GQA/MQA, D != Dv, odd head dims,
bottom-right and top-left causal masks with Sq < Skv and Sq > Skv, sliding windows, keep/drop/add
masks in all three shapes, bit-packed keep masks, the score modifiers (--softcap,
--alibi-slopes, --sinks), padded lengths, paged K/V with shuffled block tables and LSE. The
reference is computed from the same rounded inputs the tool reads, and compared with the
tolerance of the design: |err| <= (t + 2 eps_f32 (L + sqrt(n))) x max(1, sum_j p_j |v_j|) for O
(x max(1, |LSE|) for the LSE), L a row's largest |scale| sum_d |q_d k_d| (+ |mask|) and n its
visible keys; t is 0 for f32 inputs, 2^-14 for 16-bit or quantized ones, plus the rounding of a
16-bit output type (2^-11 f16, 2^-8 bf16).
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("test_run_numpy: numpy is required (python3 -m pip install numpy); not run")
    sys.exit(1)

# the float64 reference the package's tests use too, one directory up
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from reference import attention_ref  # noqa: E402
from tool_args import fai_from_argv  # noqa: E402

GARBAGE = 37.0  # magnitude of values the tool must never read (padding rows, unused pages)


# -- dtypes ----------------------------------------------------------------------------------------

def to_bf16_bits(x):
    """float32 -> bfloat16 bits (uint16), round to nearest even."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def from_bf16_bits(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def stored(x, dt):
    """(array written to the .npy file, the float64 values it holds)."""
    if dt == "f32":
        a = x.astype(np.float32)
        return a, a.astype(np.float64)
    if dt == "f16":
        a = x.astype(np.float16)
        return a, a.astype(np.float64)
    a = to_bf16_bits(x.astype(np.float32))
    return a, from_bf16_bits(a).astype(np.float64)


# -- quantized K and V -----------------------------------------------------------------------------

QUANT = ("i8", "e4m3", "e5m2")
QMAX = {"i8": 127.0, "e4m3": 448.0, "e5m2": 57344.0}


def fp8_values(dt):
    """The value of each of the 256 codes of e4m3 (the "fn" variant: no infinities, S.1111.111
    is NaN) or e5m2 (IEEE-like: the upper byte of a binary16), NaN for NaN and Inf codes."""
    bits = np.arange(256)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    ebits, mbits = (4, 3) if dt == "e4m3" else (5, 2)
    e = (bits >> mbits) & ((1 << ebits) - 1)
    m = (bits & ((1 << mbits) - 1)).astype(np.float64)
    bias = (1 << (ebits - 1)) - 1
    mag = np.where(e == 0, m / (1 << mbits) * 2.0 ** (1 - bias),
                   (1 + m / (1 << mbits)) * 2.0 ** (e - bias))
    special = ((e == 15) & (m == 7)) if dt == "e4m3" else (e == 31)
    return np.where(special, np.nan, sign * mag)


def quantize(x, dt, kind, rng):
    """x float64 [B, S, H, D] as quantized codes: (file array: int8 codes or uint8 fp8 bytes, the
    float64 values code x scale fai reads, float32 scales of kind 'token' [B, S, H], 'head' [H]
    or 'tensor' [])."""
    mag = np.abs(x)
    amax = (mag.max(axis=-1) if kind == "token" else mag.max(axis=(0, 1, 3)) if kind == "head"
            else mag.max())
    amax = np.where(amax > 0, amax, 1.0)
    scales = (amax / QMAX[dt] * rng.uniform(1.0, 1.25, np.shape(amax))).astype(np.float32)
    per_row = (scales[..., None] if kind == "token" else scales[:, None] if kind == "head"
               else scales).astype(np.float64)
    y = x / per_row
    if dt == "i8":
        codes = np.clip(np.rint(y), -127, 127).astype(np.int8)
        return codes, codes * per_row, scales
    table = fp8_values(dt)
    finite = np.flatnonzero(np.isfinite(table))
    order = finite[np.argsort(table[finite])]
    sorted_values = table[order]
    at = np.clip(np.searchsorted(sorted_values, y), 1, len(order) - 1)
    nearer_below = np.abs(y - sorted_values[at - 1]) <= np.abs(sorted_values[at] - y)
    codes = order[np.where(nearer_below, at - 1, at)].astype(np.uint8)
    return codes, table[codes] * per_row, scales


def output_values(arr, dt):
    if dt == "f32":
        assert arr.dtype == np.float32, arr.dtype
        return arr.astype(np.float64)
    if dt == "f16":
        assert arr.dtype == np.float16, arr.dtype
        return arr.astype(np.float64)
    assert arr.dtype == np.uint16, arr.dtype
    return from_bf16_bits(arr).astype(np.float64)


# -- reference -------------------------------------------------------------------------------------

def reference(c, q, k, v, mask, sq_len, skv_len):
    """The package tests' float64 reference on the case: q [B,Sq,Hq,D], k [B,Skv,Hkv,D],
    v [B,Skv,Hkv,Dv] dense float64 values, mask the file's mask broadcast to [B,Hq,Sq,>= Skv] or
    None; the scale and softcap rounded to float32, as the tool reads them. Returns O [B,Sq,Hq,Dv],
    LSE [B,Hq,Sq], max(1, sum_j p_j |v_j|) [B,Sq,Hq,Dv] and the rounding term
    ROUNDING eps (L + sqrt(n)) [B,Hq,Sq]."""
    keep = add = None
    if mask is not None:
        m = mask[..., :k.shape[1]]  # a paged mask is as wide as the block table's pages
        kind = c["mask"][0]
        if kind == "add":
            add = m.astype(np.float64)
        else:
            keep = m == 0 if kind == "drop" else m != 0
    scale = c["scale"] if c["scale"] is not None else 1.0 / np.sqrt(q.shape[3])
    ref = attention_ref(
        q, k, v, causal={None: None, "br": "bottom_right", "tl": "top_left"}[c["causal"]],
        window=c["window"], keep=keep, add=add, scale=float(np.float32(scale)),
        seqlens_q=sq_len, seqlens_kv=skv_len,
        softcap=float(np.float32(c["softcap"])) if c["softcap"] else None,
        alibi_slopes=None if c["alibi"] is None else c["alibi"].astype(np.float64),
        sinks=None if c["sinks"] is None else c["sinks"].astype(np.float64))
    return ref[0], ref[1], ref.o_scale, ref.lse_slack


# -- cases -----------------------------------------------------------------------------------------

def case(name, **kw):
    c = dict(name=name, B=2, Sq=8, Skv=8, Hq=2, Hkv=2, D=16, Dv=None, q="f32", k="f32", v="f32",
             out="f32", causal=None, window=None, mask=None, scale=None, seqlens_q=False,
             seqlens_kv=False, page=None, lse=True, threads=None, workers=None, bf16=False,
             amp=1.0, softcap=None, alibi=None, sinks=None, k_scale="token", v_scale="token",
             k_channel=None)
    c.update(kw)
    if c["Dv"] is None:
        c["Dv"] = c["D"]
    if "bf16" in (c["q"], c["k"], c["v"]):
        c["bf16"] = True
    return c


CASES = [
    case("f32_basic"),
    case("f16_inputs", q="f16", k="f16", v="f16"),
    case("bf16_all", q="bf16", k="bf16", v="bf16", out="bf16"),
    case("q32_kv16_out16", k="f16", v="f16", out="f16", Sq=5, Skv=11),
    case("mixed_dtypes", q="bf16", k="f16", v="f32", out="f16"),
    case("mqa", Hq=4, Hkv=1, D=32),
    case("gqa_d_ne_dv", Hq=4, Hkv=2, D=8, Dv=24, Sq=6, Skv=9),
    case("odd_dims", Hq=2, Hkv=1, D=7, Dv=5, Sq=3, Skv=10),
    case("causal_br_sq_lt_skv", causal="br", Sq=5, Skv=13),
    case("causal_br_sq_gt_skv", causal="br", Sq=13, Skv=5, Hq=4, Hkv=2),
    case("causal_tl_sq_lt_skv", causal="tl", Sq=5, Skv=13),
    case("causal_tl_sq_gt_skv", causal="tl", Sq=13, Skv=5, k="f16", v="f16"),
    case("window_left", window=(3, 0), Sq=9, Skv=12),
    case("window_causal_br", causal="br", window=(2, 1), Sq=7, Skv=15),
    case("window_causal_tl", causal="tl", window=(4, 2), Sq=12, Skv=6),
    case("window_right_only", window=(-1, 2), Sq=10, Skv=10),
    case("keep_2d", mask=("keep", 2), Sq=6, Skv=9),
    case("keep_3d", mask=("keep", 3), Sq=6, Skv=9, causal="br"),
    case("keep_4d", mask=("keep", 4), Hq=4, Hkv=2, Sq=6, Skv=9),
    case("drop_2d", mask=("drop", 2), Sq=7, Skv=7),
    case("drop_3d", mask=("drop", 3), Sq=7, Skv=12, k="f16", v="f16"),
    case("drop_4d", mask=("drop", 4), Sq=4, Skv=12, window=(5, 5)),
    case("add_2d", mask=("add", 2), Sq=8, Skv=8),
    case("add_3d", mask=("add", 3), Sq=5, Skv=11, causal="tl"),
    case("add_4d", mask=("add", 4), Hq=4, Hkv=1, Sq=6, Skv=10),
    case("seqlens_q", seqlens_q=True, B=3, Sq=9, Skv=9),
    case("seqlens_kv_causal", seqlens_kv=True, B=3, Sq=6, Skv=14, causal="br"),
    case("seqlens_both_mask", seqlens_q=True, seqlens_kv=True, B=3, Sq=7, Skv=12,
         mask=("keep", 4), Hq=2, Hkv=1),
    case("paged_1", page=1, B=2, Sq=3, Skv=9),
    case("paged_3_causal_gqa", page=3, B=3, Sq=5, Skv=17, Hq=4, Hkv=2, causal="br"),
    case("paged_16_bf16_mask", page=16, B=2, Sq=6, Skv=40, q="bf16", k="bf16", v="bf16",
         seqlens_q=True, mask=("add", 3)),
    case("paged_decode_f16", page=16, B=4, Sq=1, Skv=100, Hq=8, Hkv=2, D=64, k="f16", v="f16"),
    case("scale", scale=0.37, Sq=6, Skv=10),
    # a scale of 0 weighs every visible key alike, a subnormal f32 one all but alike (one that
    # rounds to 0 in f32 is refused: test_run_badinput.py)
    case("scale_zero", scale=0.0, Sq=6, Skv=10, causal="br", amp=3.0),
    case("scale_subnormal", scale=1e-40, Sq=6, Skv=10, amp=3.0),
    # N(0, 9) inputs at D = 128: logits in the tens, where the tolerance grows with them
    case("f32_large_logits", B=1, Sq=64, Skv=64, Hq=4, Hkv=2, D=128, causal="br", amp=3.0),
    case("threads_workers", B=1, Sq=70, Skv=70, Hq=2, Hkv=1, D=64, causal="br", threads=2,
         workers=3),
    case("no_lse_window_mask", B=3, Sq=9, Skv=13, window=(2, -1), mask=("drop", 3),
         seqlens_kv=True, lse=False),
    # score modifiers and bit masks
    case("bits_2d", mask=("bits", 2), Sq=6, Skv=21),
    case("bits_3d_causal", mask=("bits", 3), Sq=7, Skv=30, causal="br", k="f16", v="f16"),
    case("bits_4d_paged", mask=("bits", 4), page=4, B=2, Sq=5, Skv=19, Hq=4, Hkv=2),
    case("softcap", softcap=2.5, Sq=9, Skv=14, amp=2.0),
    case("alibi_causal", alibi=True, causal="br", Hq=4, Hkv=2, Sq=6, Skv=20),
    case("alibi_top_left_window", alibi=True, causal="tl", window=(4, 0), Sq=8, Skv=12),
    case("sinks_masked_rows", sinks=True, mask=("keep", 3), Sq=6, Skv=10, seqlens_kv=True,
         B=3),
    case("all_modifiers_paged_bf16", softcap=30.0, alibi=True, sinks=True, page=8, B=2, Sq=4,
         Skv=40, Hq=4, Hkv=2, q="bf16", k="bf16", v="bf16", causal="br", mask=("bits", 3)),
    # quantized K and V: int8, and fp8 as uint8 bytes with --k-dtype / --v-dtype
    case("i8_token_decode", k="i8", v="i8", B=2, Sq=1, Skv=40, Hq=8, Hkv=2, D=32),
    case("i8_head_tensor_prefill", k="i8", v="i8", k_scale="head", v_scale="tensor", Sq=12,
         Skv=12, Hq=4, Hkv=2, causal="br"),
    case("e4m3_token_paged", k="e4m3", v="e4m3", page=4, B=3, Sq=3, Skv=21, Hq=4, Hkv=2,
         causal="br"),
    case("e5m2_seqlens", k="e5m2", v="e5m2", k_scale="tensor", v_scale="head", B=3, Sq=5,
         Skv=14, seqlens_kv=True, causal="tl"),
    case("mixed_quantized_k_and_v", q="f16", k="i8", v="e5m2", k_scale="token",
         v_scale="tensor", Sq=6, Skv=17, Hq=4, Hkv=1, Dv=24, window=(5, 2)),
    case("e4m3_k_f16_v_paged_mask", k="e4m3", v="f16", k_scale="head", page=8, B=2, Sq=4,
         Skv=30, mask=("keep", 3), out="f16"),
    # K's scales per channel as well: [Hkv, D], or [D] for every kv head
    case("i8_channels_decode", k="i8", v="i8", k_channel="heads", B=2, Sq=1, Skv=40, Hq=8,
         Hkv=2, D=32),
    case("e4m3_channels_shared_paged", k="e4m3", v="i8", k_channel="shared", page=4, B=2, Sq=5,
         Skv=21, Hq=4, Hkv=2, causal="br"),
]


# -- running ---------------------------------------------------------------------------------------

def tolerance(c):
    """The dtype terms t of O and of LSE (the rounding term comes from the reference)."""
    low = any(c[t] != "f32" for t in ("q", "k", "v"))
    tol = 2.0 ** -14 if low else 0.0
    if c["out"] == "f16":
        tol += 2.0 ** -11
    elif c["out"] == "bf16":
        tol += 2.0 ** -8
    return tol, (2.0 ** -14 if low else 0.0)


def build(c, rng, d):
    """Writes the case's inputs to d; returns (argv, reference O, reference LSE)."""
    B, Sq, Skv, Hq, Hkv, D, Dv = (c[x] for x in ("B", "Sq", "Skv", "Hq", "Hkv", "D", "Dv"))
    sq_len = np.full(B, Sq, dtype=np.int32)
    skv_len = np.full(B, Skv, dtype=np.int32)
    if c["seqlens_q"]:
        sq_len = rng.integers(0, Sq + 1, B).astype(np.int32)
        sq_len[0] = Sq
        if B > 2:
            sq_len[2] = 0
    if c["seqlens_kv"] or c["page"]:
        skv_len = rng.integers(0, Skv + 1, B).astype(np.int32)
        skv_len[-1] = Skv
        if B > 2:
            skv_len[1] = 0

    qx = c["amp"] * rng.standard_normal((B, Sq, Hq, D))
    kx = c["amp"] * rng.standard_normal((B, Skv, Hkv, D))
    vx = c["amp"] * rng.standard_normal((B, Skv, Hkv, Dv))
    # garbage where the tool must not look: query rows past seqlens_q, keys past seqlens_kv
    for b in range(B):
        qx[b, sq_len[b]:] = GARBAGE
        kx[b, skv_len[b]:] = GARBAGE
        vx[b, skv_len[b]:] = -GARBAGE
    q_file, q = stored(qx, c["q"])
    args = ["run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy"]
    scales = {}  # of a quantized K and V, dense: [B, Skv, Hkv], [Hkv] or []
    if c["k"] in QUANT:
        k_file, k, scales["k"] = quantize(kx, c["k"], c["k_scale"], rng)
    else:
        k_file, k = stored(kx, c["k"])
    if c["v"] in QUANT:
        v_file, v, scales["v"] = quantize(vx, c["v"], c["v_scale"], rng)
    else:
        v_file, v = stored(vx, c["v"])
    for t in ("k", "v"):
        if c[t] in ("e4m3", "e5m2"):
            args += ["--%s-dtype" % t, c[t]]
    np.save(os.path.join(d, "q.npy"), q_file)

    if c["page"]:
        ps = c["page"]
        pps = (Skv + ps - 1) // ps + 1  # one spare column in the block table
        num_pages = B * pps + 3
        perm = rng.permutation(num_pages)
        bt = perm[:B * pps].reshape(B, pps).astype(np.int32)
        kpool = rng.standard_normal((num_pages, ps, Hkv, D)) * GARBAGE
        vpool = rng.standard_normal((num_pages, ps, Hkv, Dv)) * GARBAGE
        # quantized: random codes; per-token scales NaN where no key is (a scale fai must not
        # read: it refuses a run that reads one)
        kpool = (rng.integers(0, 256, kpool.shape).astype(k_file.dtype) if c["k"] in QUANT
                 else stored(kpool, c["k"])[0])
        vpool = (rng.integers(0, 256, vpool.shape).astype(v_file.dtype) if c["v"] in QUANT
                 else stored(vpool, c["v"])[0])
        pooled = {t: np.full((num_pages, ps, Hkv), np.nan, np.float32) for t, sc in
                  scales.items() if sc.ndim == 3}
        for b in range(B):
            for p in range((int(skv_len[b]) + ps - 1) // ps):
                lo, hi = p * ps, min((p + 1) * ps, int(skv_len[b]))
                kpool[bt[b, p], :hi - lo] = k_file[b, lo:hi]
                vpool[bt[b, p], :hi - lo] = v_file[b, lo:hi]
                for t, pool_scales in pooled.items():
                    pool_scales[bt[b, p], :hi - lo] = scales[t][b, lo:hi]
        scales.update(pooled)
        np.save(os.path.join(d, "k.npy"), kpool)
        np.save(os.path.join(d, "v.npy"), vpool)
        np.save(os.path.join(d, "bt.npy"), bt)
        args += ["--block-table", "bt.npy"]
        mask_kv = pps * ps
    else:
        np.save(os.path.join(d, "k.npy"), k_file)
        np.save(os.path.join(d, "v.npy"), v_file)
        mask_kv = Skv
    for t, sc in scales.items():
        np.save(os.path.join(d, t + "s.npy"), sc)
        args += ["--%s-scale" % t, t + "s.npy"]
    if c["k_channel"]:  # K = code x scale x channel scale
        channels = rng.uniform(0.25, 4.0, (D,) if c["k_channel"] == "shared" else (Hkv, D))
        channels = channels.astype(np.float32)
        np.save(os.path.join(d, "kc.npy"), channels)
        args += ["--k-channel-scale", "kc.npy"]
        k = k * channels.astype(np.float64)

    if c["alibi"] is True:  # the standard slopes of Hq heads, as fai.alibi_slopes gives them
        n = 1 << (Hq.bit_length() - 1)
        sl = [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
        sl += [2.0 ** (-4.0 * (2 * k + 1) / n) for k in range(Hq - n)]
        c = dict(c, alibi=np.array(sl, dtype=np.float32))
    if c["alibi"] is not None:
        np.save(os.path.join(d, "slopes.npy"), c["alibi"])
        args += ["--alibi-slopes", "slopes.npy"]
    if c["sinks"] is True:
        sk = (rng.standard_normal(Hq) * 1.5).astype(np.float32)
        sk[-1] = -np.inf  # a head without a sink
        c = dict(c, sinks=sk)
    if c["sinks"] is not None:
        np.save(os.path.join(d, "sinks.npy"), c["sinks"])
        args += ["--sinks", "sinks.npy"]
    if c["softcap"]:
        args += ["--softcap", repr(c["softcap"])]

    mask = None
    if c["mask"]:
        kind, rank = c["mask"]
        full = (B, Hq, Sq, mask_kv)
        shape = full[4 - rank:] if rank != 3 else (B, Sq, mask_kv)
        if kind == "add":
            m = (rng.standard_normal(shape) * 2).astype(np.float32)
            m[rng.random(shape) < 0.25] = -np.inf
            m[..., 1, :] = -np.inf  # a fully masked row
        else:
            m = rng.random(shape) < (0.7 if kind in ("keep", "bits") else 0.3)
            if kind in ("keep", "bits"):
                m[..., 1, :] = False
            else:
                m[..., 1, :] = True
            if rank == 4 and kind != "bits":
                m = m.astype(np.uint8) * 3  # any nonzero byte counts
        if kind == "bits":  # 8 keys a byte, the first in the least significant bit
            np.save(os.path.join(d, "m.npy"), np.packbits(m, axis=-1, bitorder="little"))
        else:
            np.save(os.path.join(d, "m.npy"), m)
        args += ["--" + {"keep": "mask", "drop": "mask-drop", "add": "mask-add",
                         "bits": "mask-bits"}[kind], "m.npy"]
        if rank == 2:
            mask = np.broadcast_to(m, (B, Hq) + m.shape)
        elif rank == 3:
            mask = np.broadcast_to(m[:, None], (B, Hq) + m.shape[1:])
        else:
            mask = m

    if c["seqlens_q"]:
        np.save(os.path.join(d, "sq.npy"), sq_len)
        args += ["--seqlens-q", "sq.npy"]
    if c["seqlens_kv"] or c["page"]:
        np.save(os.path.join(d, "skv.npy"), skv_len)
        args += ["--seqlens-kv", "skv.npy"]
    if c["causal"] == "br":
        args.append("--causal")
    elif c["causal"] == "tl":
        args.append("--causal-top-left")
    if c["window"]:
        args += ["--window", "%d,%d" % c["window"]]
    if c["scale"] is not None:
        args += ["--scale", repr(c["scale"])]
    if c["bf16"]:
        args.append("--bf16")
    if c["out"] != "f32" or c["name"] == "f32_basic":
        args += ["--out-dtype", c["out"]]
    if c["lse"]:
        args += ["--lse", "lse.npy"]
    if c["threads"] is not None:
        args += ["--threads", str(c["threads"])]
    if c["workers"] is not None:
        args += ["--workers", str(c["workers"])]

    ref = reference(c, q, k, v, mask, sq_len, skv_len)
    return args, ref, sq_len, c


def check(fai, c, seed):
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory(prefix="fai_run_") as d:
        args, (o_ref, lse_ref, o_scale, slack), sq_len, c = build(c, rng, d)
        r = subprocess.run([fai] + args, cwd=d, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            return "exit %d: %s (fai %s)" % (r.returncode, r.stderr.strip(), " ".join(args))
        if r.stderr:
            return "unexpected stderr: %s" % r.stderr.strip()
        o = output_values(np.load(os.path.join(d, "o.npy")), c["out"])
        if o.shape != o_ref.shape:
            return "O shape %s, expected %s" % (o.shape, o_ref.shape)
        tol, lse_tol = tolerance(c)
        if not np.all(np.isfinite(o)):
            return "O has non-finite values"
        # rows that see no key have no rounding term: there O must be exactly 0
        bound = (tol + np.transpose(slack, (0, 2, 1))[..., None]) * o_scale
        excess = np.abs(o - o_ref) - bound
        if excess.size and excess.max() > 0:
            idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(excess)), excess.shape))
            return "O error %.3g above its tolerance %.3g at %s: got %.8g, expected %.8g" % (
                abs(o[idx] - o_ref[idx]), bound[idx], idx, o[idx], o_ref[idx])
        # rows at or past seqlens_q are exactly zero
        for b in range(c["B"]):
            if np.any(o[b, sq_len[b]:] != 0):
                return "O rows past seqlens_q[%d] = %d are not zero" % (b, sq_len[b])
        if c["lse"]:
            lse = np.load(os.path.join(d, "lse.npy"))
            if lse.dtype != np.float32 or lse.shape != lse_ref.shape:
                return "LSE is %s %s, expected float32 %s" % (lse.dtype, lse.shape, lse_ref.shape)
            lse = lse.astype(np.float64)
            inf_ref = np.isneginf(lse_ref)
            if np.any(np.isneginf(lse) != inf_ref):
                idx = tuple(int(i) for i in np.argwhere(np.isneginf(lse) != inf_ref)[0])
                return "LSE -inf pattern differs at %s: got %.8g, expected %.8g" % (
                    idx, lse[idx], lse_ref[idx])
            if np.any(np.isnan(lse)) or np.any(np.isposinf(lse)):
                return "LSE has NaN or +inf"
            fin = ~inf_ref
            if np.any(fin):
                e = np.abs(lse[fin] - lse_ref[fin])
                bound = (lse_tol + slack[fin]) * np.maximum(1.0, np.abs(lse_ref[fin]))
                if np.any(e > bound):
                    return "LSE error %.3g above its tolerance %.3g" % (
                        e[np.argmax(e - bound)], bound[np.argmax(e - bound)])
        names = sorted(os.listdir(d))
        expected = {"o.npy", "lse.npy"} if c["lse"] else {"o.npy"}
        stray = [n for n in names if n.startswith(".")]
        if stray or not expected <= set(names):
            return "unexpected files in the output directory: %s" % names
    return None


def main():
    fai = fai_from_argv("test_run_numpy")
    only = os.environ.get("FAI_RUN_CASE")
    passed = failed = 0
    for n, c in enumerate(CASES):
        if only and only not in c["name"]:
            continue
        try:
            why = check(fai, c, 1000 + n)
        except Exception as e:  # a broken output file must fail the case, not the run
            why = "%s: %s" % (type(e).__name__, e)
        if why:
            failed += 1
            print("FAIL %s: %s" % (c["name"], why))
        else:
            passed += 1
            print("ok   %s" % c["name"])
        sys.stdout.flush()
    print("run_numpy: %d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
