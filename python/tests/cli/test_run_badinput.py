#!/usr/bin/env python3
"""Bad input to `fai run`: every case must exit 2, print exactly one line on stderr (naming the
culprit), print nothing on stdout, and leave the output files as they were: byte-identical when
they existed, absent when they did not, with no temporary files left behind.

Usage: python3 test_run_badinput.py /path/to/fai

The .npy files are built byte by byte here (no numpy needed), so malformed ones are exact.
"""
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import threading

from tool_args import fai_from_argv


def npy(descr, shape, payload=None, fortran=False, version=1, header=None, fill=0.25):
    """A .npy image. payload defaults to the right number of bytes (float32 `fill` for '<f4')."""
    if header is None:
        shape_text = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
        header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
            descr, "True" if fortran else "False", shape_text)
    pre = 10 if version == 1 else 12
    total = (pre + len(header) + 1 + 63) // 64 * 64
    header = header + " " * (total - pre - len(header) - 1) + "\n"
    hb = header.encode("latin-1")
    lenfield = struct.pack("<H", len(hb)) if version == 1 else struct.pack("<I", len(hb))
    if payload is None:
        count = 1
        for d in shape:
            count *= max(d, 0)
        size = {"<f4": 4, "<f2": 2, "<u2": 2, "<i4": 4, "|b1": 1, "|u1": 1, "|i1": 1, "<f8": 8,
                ">f4": 4, "|O": 8}.get(descr, 4)
        if descr == "<f4":
            payload = struct.pack("<%df" % count, *([fill] * count))
        elif descr == "<i4":
            payload = struct.pack("<%di" % count, *([1] * count))
        else:
            payload = bytes(count * size)
    return b"\x93NUMPY" + bytes([version, 0]) + lenfield + hb + payload


def f32(shape, fill=0.25):
    return npy("<f4", shape, fill=fill)


def i32(shape, values):
    return npy("<i4", shape, payload=struct.pack("<%di" % len(values), *values))


# A valid problem: B=2, Sq=4, Hq=2, D=8; Skv=6, Hkv=1, Dv=8.
GOOD = {
    "q.npy": f32((2, 4, 2, 8)),
    "k.npy": f32((2, 6, 1, 8)),
    "v.npy": f32((2, 6, 1, 8), fill=0.5),
}
BASE = ["--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy"]

# Paged variant: pool of 3 pages of 4 keys; block table [2, 2]; seqlens_kv (6, 5).
PAGED = {
    "kp.npy": f32((3, 4, 1, 8)),
    "vp.npy": f32((3, 4, 1, 8), fill=0.5),
    "skv.npy": i32((2,), [6, 5]),
}
PAGED_ARGS = ["--q", "q.npy", "--k", "kp.npy", "--v", "vp.npy", "--out", "o.npy",
              "--seqlens-kv", "skv.npy"]

# Quantized variant: K int8 codes 0 with one scale, V e4m3 codes of 1.0 (0x38) as uint8 bytes
# with a per-head scale of 0.5, so that every output element is 0.5 again.
QUANT = {
    "k8.npy": npy("|i1", (2, 6, 1, 8)),
    "v8.npy": npy("|u1", (2, 6, 1, 8), payload=bytes([0x38]) * 96),
    "ks.npy": f32(()),
    "vs.npy": f32((1,), fill=0.5),
}
QUANT_ARGS = ["--q", "q.npy", "--k", "k8.npy", "--v", "v8.npy", "--out", "o.npy", "--k-scale",
              "ks.npy", "--v-scale", "vs.npy", "--v-dtype", "e4m3"]


def with_arg(args, opt, value):
    """args with the value of opt replaced."""
    out = list(args)
    out[out.index(opt) + 1] = value
    return out


def without(args, opt, has_value=True):
    out = list(args)
    i = out.index(opt)
    del out[i:i + (2 if has_value else 1)]
    return out


Q_TRUNC = f32((2, 4, 2, 8))
Q_TRUNC = Q_TRUNC[:len(Q_TRUNC) - 5]
Q_HEADER_PAST = bytearray(f32((2, 4, 2, 8)))
Q_HEADER_PAST[8:10] = struct.pack("<H", 60000)
Q_VERSION_4 = bytearray(f32((2, 4, 2, 8)))
Q_VERSION_4[6] = 4
Q_HEADER = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }"

# name, extra files, argv (after "run"), text the stderr line must contain
CASES = [
    ("truncated payload", {"q.npy": Q_TRUNC}, BASE, "q.npy"),
    ("truncated preamble", {"q.npy": b"\x93NUMPY\x01"}, BASE, "q.npy"),
    ("empty file", {"k.npy": b""}, BASE, "k.npy"),
    ("wrong magic", {"v.npy": b"PK\x03\x04" + bytes(200)}, BASE, "v.npy"),
    ("header length past the file", {"q.npy": bytes(Q_HEADER_PAST)}, BASE, "q.npy"),
    ("header not a dict", {"q.npy": npy("<f4", (1,), header="['descr', '<f4']")}, BASE,
     "q.npy"),
    ("header missing shape",
     {"q.npy": npy("<f4", (1,), header="{'descr': '<f4', 'fortran_order': False}")}, BASE,
     "shape"),
    ("header garbage bytes",
     {"q.npy": npy("<f4", (1,), header="{'descr': '<f4', \x01\x02\x7f\xff}")}, BASE, "q.npy"),
    ("big-endian", {"k.npy": npy(">f4", (2, 6, 1, 8))}, BASE, "big-endian"),
    ("fortran order", {"v.npy": npy("<f4", (2, 6, 1, 8), fortran=True)}, BASE, "Fortran"),
    ("object dtype", {"q.npy": npy("|O", (2, 4, 2, 8))}, BASE, "object"),
    ("float64 dtype", {"q.npy": npy("<f8", (2, 4, 2, 8))}, BASE, "<f8"),
    ("int32 as q", {"q.npy": npy("<i4", (2, 4, 2, 8))}, BASE, "int32"),
    ("uint16 without --bf16", {"q.npy": npy("<u2", (2, 4, 2, 8))}, BASE, "--bf16"),
    ("negative shape", {"q.npy": npy("<f4", (2, -4, 2, 8), payload=b"")}, BASE, "negative"),
    ("overflowing dimension",
     {"q.npy": npy("<f4", (2, 99999999999999999999999, 2, 8), payload=b"")}, BASE, "q.npy"),
    ("overflowing product",
     {"q.npy": npy("<f4", (4294967296, 4294967296, 2, 8), payload=b"")}, BASE, "overflow"),
    ("truncated inside the header", {"q.npy": f32((2, 4, 2, 8))[:40]}, BASE, "truncated"),
    ("magic only", {"k.npy": b"\x93NUMPY"}, BASE, "k.npy"),
    ("empty v", {"v.npy": b""}, BASE, "v.npy"),
    ("k payload truncated", {"k.npy": f32((2, 6, 1, 8))[:-3]}, BASE, "truncated"),
    ("seqlens truncated", {"s.npy": i32((2,), [1, 2])[:-2]}, BASE + ["--seqlens-q", "s.npy"],
     "--seqlens-q"),
    ("block table wrong magic", dict(PAGED, **{"bt.npy": b"NUMPY" + bytes(100)}),
     PAGED_ARGS + ["--block-table", "bt.npy"], "magic"),
    ("unsupported version", {"q.npy": bytes(Q_VERSION_4)}, BASE, "version"),
    ("header length zero", {"q.npy": b"\x93NUMPY\x01\x00\x00\x00" + bytes(64)}, BASE, "q.npy"),
    ("header without fortran_order",
     {"q.npy": npy("<f4", (1,), header="{'descr': '<f4', 'shape': (2, 4, 2, 8), }")}, BASE,
     "fortran_order"),
    ("header without descr",
     {"q.npy": npy("<f4", (1,), header="{'fortran_order': False, 'shape': (2, 4, 2, 8), }")},
     BASE, "descr"),
    ("shape a list", {"q.npy": npy("<f4", (1,), header=Q_HEADER % "[2, 4, 2, 8]")}, BASE, "shape"),
    ("shape with a float", {"q.npy": npy("<f4", (1,), header=Q_HEADER % "(2, 4.5, 2, 8)")}, BASE,
     "shape"),
    ("big-endian float16 k", {"k.npy": npy(">f2", (2, 6, 1, 8))}, BASE, "big-endian"),
    ("big-endian seqlens", {"s.npy": npy(">i4", (2,), payload=bytes(8))},
     BASE + ["--seqlens-q", "s.npy"], "big-endian"),
    ("fortran-order mask", {"m.npy": npy("|b1", (4, 6), fortran=True)}, BASE + ["--mask", "m.npy"],
     "Fortran"),
    ("object additive mask", {"m.npy": npy("|O", (4, 6))}, BASE + ["--mask-add", "m.npy"],
     "object"),
    ("unicode dtype", {"q.npy": npy("<U4", (2, 4, 2, 8), payload=bytes(2 * 4 * 2 * 8 * 16))},
     BASE, "<U4"),
    ("complex dtype", {"v.npy": npy("<c8", (2, 6, 1, 8), payload=bytes(2 * 6 * 8 * 8))}, BASE,
     "<c8"),
    ("negative dimension in k", {"k.npy": npy("<f4", (2, 6, -1, 8), payload=b"")}, BASE,
     "negative"),
    ("overflowing dimension in k",
     {"k.npy": npy("<f4", (2, 9223372036854775807, 1, 8), payload=b"")}, BASE, "overflow"),
    ("q rank 0", {"q.npy": f32(())}, BASE, "--q"),
    ("v rank 2", {"v.npy": f32((12, 8))}, BASE, "--v"),
    ("seqlens rank 2", {"s.npy": i32((2, 1), [1, 2])}, BASE + ["--seqlens-q", "s.npy"],
     "--seqlens-q"),
    ("block table rank 1", dict(PAGED, **{"bt.npy": i32((4,), [0, 1, 2, 0])}),
     PAGED_ARGS + ["--block-table", "bt.npy"], "--block-table"),
    ("rank 9", {"q.npy": npy("<f4", (1,) * 9)}, BASE, "rank"),
    ("q rank 3", {"q.npy": f32((2, 4, 16))}, BASE, "--q"),
    ("k rank 5", {"k.npy": f32((2, 6, 1, 8, 1))}, BASE, "--k"),
    ("k head_dim mismatch", {"k.npy": f32((2, 6, 1, 4))}, BASE, "head_dim"),
    ("k batch mismatch", {"k.npy": f32((3, 6, 1, 8))}, BASE, "batch"),
    ("v seq mismatch", {"v.npy": f32((2, 5, 1, 8))}, BASE, "--v"),
    ("v heads mismatch", {"v.npy": f32((2, 6, 2, 8))}, BASE, "--v"),
    ("hq not a multiple of hkv",
     {"q.npy": f32((2, 4, 3, 8)), "k.npy": f32((2, 6, 2, 8)), "v.npy": f32((2, 6, 2, 8))},
     BASE, "heads"),
    ("head_dim zero",
     {"q.npy": f32((2, 4, 2, 0)), "k.npy": f32((2, 6, 1, 0))}, BASE, "head_dim"),
    ("v head_dim_v zero", {"v.npy": f32((2, 6, 1, 0))}, BASE, "head_dim_v"),
    ("paged pool of empty pages", dict(PAGED, **{"bt.npy": i32((2, 2), [0, 1, 2, 0]),
                                                 "kp.npy": f32((3, 0, 1, 8)),
                                                 "vp.npy": f32((3, 0, 1, 8))}),
     PAGED_ARGS + ["--block-table", "bt.npy"], "page_size"),
    ("a device that never ends", {}, with_arg(BASE, "--q", "/dev/zero"), "magic"),
    ("missing --v", {}, without(BASE, "--v"), "--v"),
    ("missing --out", {}, without(BASE, "--out"), "--out"),
    ("missing value at the end", {}, BASE + ["--lse"], "--lse"),
    ("no arguments", {}, [], "--q"),
    ("unknown option", {}, BASE + ["--frobnicate"], "--frobnicate"),
    ("positional argument", {}, BASE + ["extra.npy"], "extra.npy"),
    ("option given twice", {}, BASE + ["--q", "q.npy"], "--q"),
    ("nonexistent input", {}, with_arg(BASE, "--k", "nope.npy"), "nope.npy"),
    ("directory as input", {}, with_arg(BASE, "--k", "."), "--k"),
    ("window without comma", {}, BASE + ["--window", "3"], "--window"),
    ("window not numbers", {}, BASE + ["--window", "a,b"], "--window"),
    ("window three values", {}, BASE + ["--window", "1,2,3"], "--window"),
    ("window below -1", {}, BASE + ["--window", "-2,0"], "--window"),
    ("window empty side", {}, BASE + ["--window", ",4"], "--window"),
    ("threads not a number", {}, BASE + ["--threads", "abc"], "--threads"),
    ("threads negative", {}, BASE + ["--threads", "-1"], "--threads"),
    ("threads with a sign", {}, BASE + ["--threads", "+2"], "--threads +2: expected an integer"),
    ("window side with a sign", {}, BASE + ["--window", "+1,0"], "--window +1,0: expected"),
    ("threads past the most a pool takes", {}, BASE + ["--threads", "2000"], "--threads 2000"),
    ("workers past the most a plan takes", {}, BASE + ["--workers", "5000"], "--workers 5000"),
    ("workers trailing junk", {}, BASE + ["--workers", "4x"], "--workers"),
    ("scale not a number", {}, BASE + ["--scale", "abc"], "--scale"),
    ("scale infinite", {}, BASE + ["--scale", "inf"], "--scale"),
    ("scale nan", {}, BASE + ["--scale", "nan"], "--scale"),
    ("out-dtype unknown", {}, BASE + ["--out-dtype", "f64"], "--out-dtype"),
    ("two causal options", {}, BASE + ["--causal", "--causal-top-left"], "--causal"),
    ("flag with a value", {}, BASE + ["--causal=yes"], "--causal"),
    ("two masks", {"m.npy": npy("|b1", (4, 6)), "d.npy": npy("|b1", (4, 6))},
     BASE + ["--mask", "m.npy", "--mask-drop", "d.npy"], "--mask"),
    ("mask wrong shape", {"m.npy": npy("|b1", (4, 5))}, BASE + ["--mask", "m.npy"], "--mask"),
    ("mask wrong batch", {"m.npy": npy("|b1", (3, 4, 6))}, BASE + ["--mask", "m.npy"], "--mask"),
    ("mask wrong heads", {"m.npy": npy("|b1", (2, 3, 4, 6))}, BASE + ["--mask", "m.npy"],
     "--mask"),
    ("mask rank 1", {"m.npy": npy("|b1", (24,))}, BASE + ["--mask", "m.npy"], "--mask"),
    ("mask float for keep", {"m.npy": f32((4, 6))}, BASE + ["--mask", "m.npy"], "float32"),
    ("additive mask bool", {"m.npy": npy("|b1", (4, 6))}, BASE + ["--mask-add", "m.npy"],
     "--mask-add"),
    ("seqlens wrong length", {"s.npy": i32((3,), [1, 2, 3])}, BASE + ["--seqlens-q", "s.npy"],
     "--seqlens-q"),
    ("seqlens float", {"s.npy": f32((2,))}, BASE + ["--seqlens-kv", "s.npy"], "--seqlens-kv"),
    ("seqlens past seq_q", {"s.npy": i32((2,), [4, 5])}, BASE + ["--seqlens-q", "s.npy"], "5"),
    ("seqlens negative", {"s.npy": i32((2,), [1, -1])}, BASE + ["--seqlens-kv", "s.npy"], "-1"),
    ("lse same file as out", {}, BASE + ["--lse", "o.npy"], "--lse"),
    ("lse same file as out, spelt otherwise", {}, BASE + ["--lse", "./o.npy"], "--lse"),
    ("lse is a directory", {"lsedir": None}, BASE + ["--lse", "lsedir"], "lsedir"),
    ("out is a directory", {"odir": None}, with_arg(BASE, "--out", "odir"), "odir"),
    ("out names an input", {}, with_arg(BASE, "--out", "q.npy"), "the same file as --q"),
    ("lse names an input", {}, BASE + ["--lse", "./k.npy"], "the same file as --k"),
    ("softcap rounds to 0", {}, BASE + ["--softcap", "1e-50"], "rounds to 0"),
    ("scale beyond float32", {}, BASE + ["--scale", "1e39"], "beyond the float32 range"),
    ("output directory missing", {}, with_arg(BASE, "--out", "nodir/o.npy"), "nodir/o.npy"),
    ("block table without seqlens-kv", dict(PAGED, **{"bt.npy": i32((2, 2), [0, 1, 2, 0])}),
     without(PAGED_ARGS, "--seqlens-kv") + ["--block-table", "bt.npy"], "--seqlens-kv"),
    ("block table entry past the pool", dict(PAGED, **{"bt.npy": i32((2, 2), [0, 1, 2, 3])}),
     PAGED_ARGS + ["--block-table", "bt.npy"], "--block-table"),
    ("block table entry negative", dict(PAGED, **{"bt.npy": i32((2, 2), [0, -1, 2, 1])}),
     PAGED_ARGS + ["--block-table", "bt.npy"], "-1"),
    ("block table wrong batch", dict(PAGED, **{"bt.npy": i32((3, 1), [0, 1, 2])}),
     PAGED_ARGS + ["--block-table", "bt.npy"], "--block-table"),
    ("block table int8 pages", dict(PAGED, **{"bt.npy": npy("|u1", (2, 2))}),
     PAGED_ARGS + ["--block-table", "bt.npy"], "--block-table"),
    ("seqlens-kv past the pages", dict(PAGED, **{"bt.npy": i32((2, 2), [0, 1, 2, 0]),
                                                 "skv.npy": i32((2,), [6, 9])}),
     PAGED_ARGS + ["--block-table", "bt.npy"], "9"),
    ("paged v pool mismatch", dict(PAGED, **{"bt.npy": i32((2, 2), [0, 1, 2, 0]),
                                             "vp.npy": f32((3, 2, 1, 8))}),
     PAGED_ARGS + ["--block-table", "bt.npy"], "--v"),
    # score modifiers and bit masks
    ("softcap negative", {}, BASE + ["--softcap", "-1"], "--softcap"),
    ("softcap not a number", {}, BASE + ["--softcap", "big"], "--softcap"),
    ("softcap inf", {}, BASE + ["--softcap", "inf"], "--softcap"),
    ("alibi slopes wrong length", {"a.npy": f32((3,))}, BASE + ["--alibi-slopes", "a.npy"],
     "--alibi-slopes"),
    ("alibi slopes int", {"a.npy": i32((2,), [1, 2])}, BASE + ["--alibi-slopes", "a.npy"],
     "--alibi-slopes"),
    ("alibi slope nan", {"a.npy": npy("<f4", (2,), payload=struct.pack("<2f", 0.5,
                                                                        float("nan")))},
     BASE + ["--alibi-slopes", "a.npy"], "alibi_slopes[1]"),
    ("sinks wrong rank", {"s.npy": f32((1, 2))}, BASE + ["--sinks", "s.npy"], "--sinks"),
    ("sink +inf", {"s.npy": npy("<f4", (2,), payload=struct.pack("<2f", float("inf"), 0.0))},
     BASE + ["--sinks", "s.npy"], "sinks[0]"),
    ("mask bits bool", {"m.npy": npy("|b1", (4, 1))}, BASE + ["--mask-bits", "m.npy"],
     "--mask-bits"),
    ("mask bits a byte per key", {"m.npy": npy("|u1", (4, 6))}, BASE + ["--mask-bits", "m.npy"],
     "ceil(Skv/8)"),
    ("mask bits with a keep mask", {"m.npy": npy("|u1", (4, 1)), "k2.npy": npy("|b1", (4, 6))},
     BASE + ["--mask-bits", "m.npy", "--mask", "k2.npy"], "exclude"),
    # quantized K and V
    ("int8 q", {"q.npy": npy("|i1", (2, 4, 2, 8))}, BASE, "--q q.npy: dtype int8"),
    ("uint8 v without --v-dtype", QUANT, without(QUANT_ARGS, "--v-dtype"),
     "--v v8.npy: dtype uint8 needs --v-dtype e4m3 or --v-dtype e5m2"),
    ("uint8 k without --k-dtype", dict(QUANT, **{"k8.npy": npy("|u1", (2, 6, 1, 8))}),
     QUANT_ARGS, "--k-dtype"),
    ("int8 k without --k-scale", QUANT, without(QUANT_ARGS, "--k-scale"),
     "--k k8.npy holds int8 codes: --k-scale is required"),
    ("e4m3 v without --v-scale", QUANT, without(QUANT_ARGS, "--v-scale"),
     "--v v8.npy holds e4m3 codes: --v-scale is required"),
    ("k-scale with a float k", QUANT, BASE + ["--k-scale", "ks.npy"],
     "--k-scale ks.npy given, but --k k.npy holds f32 values"),
    ("k-dtype unknown", QUANT, QUANT_ARGS + ["--k-dtype", "e3m4"], "--k-dtype e3m4"),
    ("k-dtype with an int8 k", QUANT, QUANT_ARGS + ["--k-dtype", "e5m2"],
     "--k-dtype e5m2 reads uint8 bytes"),
    ("v-dtype with a float v", {}, BASE + ["--v-dtype", "e5m2"], "--v-dtype e5m2"),
    ("int32 k", {"k.npy": npy("<i4", (2, 6, 1, 8))}, BASE, "--k k.npy: dtype int32"),
    ("k-scale float16", dict(QUANT, **{"ks.npy": npy("<f2", ())}), QUANT_ARGS,
     "--k-scale ks.npy: dtype float16"),
    ("k-scale wrong shape", dict(QUANT, **{"ks.npy": f32((2, 5, 1))}), QUANT_ARGS,
     "--k-scale ks.npy: shape (2, 5, 1) does not match --k: expected (2, 6, 1) per token"),
    ("v-scale per head of the wrong length", dict(QUANT, **{"vs.npy": f32((2,))}), QUANT_ARGS,
     "--v-scale vs.npy: shape (2,)"),
    ("v-scale rank 2", dict(QUANT, **{"vs.npy": f32((1, 1))}), QUANT_ARGS, "--v-scale"),
    ("v-scale negative", dict(QUANT, **{"vs.npy": f32((1,), fill=-0.5)}), QUANT_ARGS,
     "v_scale of sequence 0, key 0, kv head 0 = -0.5"),
    ("k-channel-scale with a float k", dict(QUANT, **{"kc.npy": f32((8,))}),
     BASE + ["--k-channel-scale", "kc.npy"],
     "--k-channel-scale kc.npy given, but --k k.npy holds f32 values"),
    ("k-channel-scale wrong shape", dict(QUANT, **{"kc.npy": f32((1, 7))}),
     QUANT_ARGS + ["--k-channel-scale", "kc.npy"],
     "--k-channel-scale kc.npy: shape (1, 7) does not match --k: expected (1, 8)"),
    ("k-channel-scale zero", dict(QUANT, **{"kc.npy": f32((8,), fill=0.0)}),
     QUANT_ARGS + ["--k-channel-scale", "kc.npy"],
     "k_channel_scale of kv head 0, channel 0 = 0"),
    ("k-scale nan per token", dict(QUANT, **{"ks.npy": npy("<f4", (2, 6, 1), payload=struct.pack(
        "<12f", *([1.0] * 8 + [float("nan")] + [1.0] * 3)))}), QUANT_ARGS,
     "k_scale of sequence 1, key 2, kv head 0 = nan"),
    # numbers: float32 values, written as numbers from their first character
    ("scale rounds to 0", {}, BASE + ["--scale", "1e-50"], "--scale 1e-50: rounds to 0"),
    ("scale underflows a double", {}, BASE + ["--scale", "1e-400"],
     "--scale 1e-400: rounds to 0"),
    ("scale overflows a double", {}, BASE + ["--scale", "1e400"], "beyond the float32 range"),
    ("softcap beyond float32", {}, BASE + ["--softcap", "1e39"],
     "--softcap 1e39: beyond the float32 range"),
    ("an option's empty value", {}, with_arg(BASE, "--q", ""), "--q has an empty value"),
    ("k-channel-scale in float16", dict(QUANT, **{"kc.npy": npy("<f2", (1, 8))}),
     QUANT_ARGS + ["--k-channel-scale", "kc.npy"],
     "--k-channel-scale kc.npy: dtype float16 is not float32"),
] + [
    ("%s after %r" % (opt, blank), {}, BASE + [opt, blank + "0.5"], "%s ?0.5: " % opt)
    for opt in ("--scale", "--softcap") for blank in ("\n", "\r", "\v", "\f")
] + [
    # lengths and page pools named by their option and file, before planning
    ("seqlens-q past seq_q, named", {"s.npy": i32((2,), [4, 5])},
     BASE + ["--seqlens-q", "s.npy"], "--seqlens-q s.npy: entry [1] = 5 is above q's seq_q 4"),
    ("seqlens-kv past seq_kv, named", {"s.npy": i32((2,), [7, 6])},
     BASE + ["--seqlens-kv", "s.npy"], "--seqlens-kv s.npy: entry [0] = 7 is above k's seq_kv 6"),
    ("seqlens-q negative, named", {"s.npy": i32((2,), [1, -3])},
     BASE + ["--seqlens-q", "s.npy"], "--seqlens-q s.npy: entry [1] = -3 is negative"),
    ("seqlens-kv past the pages, named", dict(PAGED, **{"bt.npy": i32((2, 2), [0, 1, 2, 0]),
                                                        "skv.npy": i32((2,), [6, 9])}),
     PAGED_ARGS + ["--block-table", "bt.npy"],
     "--seqlens-kv skv.npy: entry [1] = 9 is above the 8 keys"),
    ("paged mask narrower than the longest sequence",
     dict(PAGED, **{"bt.npy": i32((2, 2), [0, 1, 2, 0]), "m.npy": npy("|b1", (4, 5))}),
     PAGED_ARGS + ["--block-table", "bt.npy", "--mask", "m.npy"],
     "--mask m.npy: shape (4, 5) does not match [Sq, Skv] = (4, 6) (Skv: at least the longest "
     "--seqlens-kv)"),
    # (an empty batch and empty rows: the files hold no bytes)
    ("pages per sequence past int32",
     dict(PAGED, **{"q.npy": f32((0, 4, 2, 8)), "skv.npy": i32((0,), []),
                    "bt.npy": npy("<i4", (0, 2147483648), payload=b"")}),
     PAGED_ARGS + ["--block-table", "bt.npy"],
     "--block-table bt.npy: shape (0, 2147483648): pages_per_seq 2147483648 is above 2147483647"),
    ("page count past int32", dict(PAGED, **{"q.npy": f32((2, 4, 2, 0)),
                                             "bt.npy": i32((2, 2), [0, 1, 2, 0]),
                                             "kp.npy": f32((2147483648, 4, 1, 0)),
                                             "vp.npy": f32((2147483648, 4, 1, 0))}),
     PAGED_ARGS + ["--block-table", "bt.npy"],
     "--k kp.npy: shape (2147483648, 4, 1, 0): num_pages 2147483648 is above 2147483647"),
    ("page size past int32", dict(PAGED, **{"bt.npy": i32((2, 2), [0, 1, 2, 0]),
                                            "kp.npy": f32((0, 2147483648, 1, 8)),
                                            "vp.npy": f32((0, 2147483648, 1, 8))}),
     PAGED_ARGS + ["--block-table", "bt.npy"],
     "--k kp.npy: shape (0, 2147483648, 1, 8): page_size 2147483648 is above 2147483647"),
    # ceil(Skv / 8) of the largest Skv a file can give, without overflowing
    ("bit mask of the longest keys", {"q.npy": f32((0, 4, 2, 0)),
                                      "k.npy": npy("|i1", (0, 9223372036854775807, 1, 0)),
                                      "v.npy": npy("|i1", (0, 9223372036854775807, 1, 0)),
                                      "ks.npy": f32(()), "vs.npy": f32(()),
                                      "m.npy": npy("|u1", (4, 1))},
     BASE + ["--k-scale", "ks.npy", "--v-scale", "vs.npy", "--mask-bits", "m.npy"],
     "= (4, 1152921504606846976)"),
]

OLD_O = b"previous output, must survive\n"
OLD_LSE = b"previous lse, must survive\n"


def write_files(d, files):
    """Each name's bytes into directory d."""
    for fname, data in files.items():
        with open(os.path.join(d, fname), "wb") as f:
            f.write(data)


def run(fai, d, args):
    return subprocess.run([fai, "run"] + args, cwd=d, capture_output=True, timeout=120)


def one_case(fai, name, files, args, needle, preexisting):
    """Returns None or the reason the case failed."""
    d = tempfile.mkdtemp(prefix="fai_bad_")
    try:
        for fname, data in dict(GOOD, **files).items():
            if data is None:  # a directory
                os.mkdir(os.path.join(d, fname))
                continue
            with open(os.path.join(d, fname), "wb") as f:
                f.write(data)
        outs = {"o.npy": OLD_O, "lse.npy": OLD_LSE}
        if preexisting:
            for fname, data in outs.items():
                with open(os.path.join(d, fname), "wb") as f:
                    f.write(data)
        argv = list(args)
        if "--lse" not in argv and argv and argv[-1] != "--lse":
            argv += ["--lse", "lse.npy"]
        before = sorted(os.listdir(d))
        r = run(fai, d, argv)
        err = r.stderr.decode("utf-8", "replace")
        problems = []
        if r.returncode != 2:
            problems.append("exit status %d, expected 2" % r.returncode)
        if not err.endswith("\n") or err.count("\n") != 1 or not err.strip():
            problems.append("stderr is not exactly one line: %r" % err)
        if r.stdout:
            problems.append("stdout is not empty: %r" % r.stdout[:200])
        if needle not in err:
            problems.append("stderr does not mention %r: %r" % (needle, err.strip()))
        if not err.startswith("fai run: "):
            problems.append("stderr does not start with 'fai run: ': %r" % err.strip())
        after = sorted(os.listdir(d))
        if after != before:
            problems.append("directory changed: %s -> %s" % (before, after))
        if preexisting:
            for fname, data in outs.items():
                with open(os.path.join(d, fname), "rb") as f:
                    if f.read() != data:
                        problems.append("%s was changed" % fname)
        return "; ".join(problems) or None
    finally:
        shutil.rmtree(d, ignore_errors=True)


def sanity(fai):
    """The good inputs succeed (else every rejection above proves nothing), --help works."""
    d = tempfile.mkdtemp(prefix="fai_good_")
    try:
        for fname, data in dict(GOOD, **PAGED, **QUANT).items():
            with open(os.path.join(d, fname), "wb") as f:
                f.write(data)
        with open(os.path.join(d, "bt.npy"), "wb") as f:
            f.write(i32((2, 2), [0, 1, 2, 0]))
        with open(os.path.join(d, "o.npy"), "wb") as f:
            f.write(OLD_O)
        problems = []
        for label, args in (("dense", BASE + ["--lse", "lse.npy"]),
                            ("paged", PAGED_ARGS + ["--block-table", "bt.npy"]),
                            ("quantized", QUANT_ARGS)):
            r = run(fai, d, args)
            if r.returncode != 0 or r.stderr:
                problems.append("%s good input: exit %d, stderr %r" % (
                    label, r.returncode, r.stderr.decode("utf-8", "replace")))
                continue
            with open(os.path.join(d, "o.npy"), "rb") as f:
                data = f.read()
            if not data.startswith(b"\x93NUMPY") or len(data) != 128 + 2 * 4 * 2 * 8 * 4:
                problems.append("%s good input: o.npy is %d bytes" % (label, len(data)))
            # V is 0.5 everywhere, so every output element is 0.5
            if data[128:] != struct.pack("<f", 0.5) * (2 * 4 * 2 * 8):
                problems.append("%s good input: O is not all 0.5" % label)
        stray = [n for n in os.listdir(d) if n.startswith(".")]
        if stray:
            problems.append("temporary files left: %s" % stray)
        r = subprocess.run([fai, "run", "--help"], capture_output=True, timeout=60)
        if r.returncode != 0 or b"usage" not in r.stdout or r.stderr:
            problems.append("--help: exit %d, stdout %r, stderr %r" % (
                r.returncode, r.stdout[:80], r.stderr[:200]))
        return problems
    finally:
        shutil.rmtree(d, ignore_errors=True)


def streams(fai):
    """Inputs from pipes are read up to the end of the array their header declares and no
    further: a writer that goes on after the array is cut off, and the run succeeds."""
    d = tempfile.mkdtemp(prefix="fai_fifo_")
    problems = []
    try:
        write_files(d, GOOD)
        fifo = os.path.join(d, "q.fifo")
        os.mkfifo(fifo)
        tail_limit = 256 << 20  # what an unbounded reader would take, well short of trouble
        outcome = {}

        def writer():
            written = 0
            try:
                with open(fifo, "wb") as f:
                    f.write(GOOD["q.npy"])
                    chunk = bytes(1 << 20)
                    while written < tail_limit:
                        f.write(chunk)
                        written += len(chunk)
                outcome["cut"] = False
            except BrokenPipeError:
                outcome["cut"] = True
            outcome["tail"] = written

        thread = threading.Thread(target=writer)
        thread.start()
        r = run(fai, d, with_arg(BASE, "--q", "q.fifo"))
        if r.returncode != 0:
            problems.append("q from a pipe: exit %d, stderr %r" % (r.returncode, r.stderr))
            # the writer blocks until someone opens the other end: unblock it
            with open(fifo, "rb") as f:
                f.read()
        thread.join(timeout=60)
        if not outcome.get("cut"):
            problems.append("q from a pipe: read on past the array (%d bytes after it)"
                            % outcome.get("tail", -1))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return problems


def special_outputs(fai):
    """An output path is replaced only where it names a regular file: a FIFO or a link to
    nothing is refused and left as it is; a link is written through (the file it leads to gets
    the output, keeping its permissions, and the link stays); a name as long as the file system
    allows is written."""
    d = tempfile.mkdtemp(prefix="fai_outputs_")
    problems = []
    try:
        write_files(d, GOOD)
        os.mkfifo(os.path.join(d, "o.fifo"))
        os.symlink("missing.npy", os.path.join(d, "dangling.npy"))
        for out, needle in (("o.fifo", "not a regular file"),
                            ("dangling.npy", "symbolic link to a missing file")):
            r = run(fai, d, with_arg(BASE, "--out", out))
            err = r.stderr.decode("utf-8", "replace")
            if r.returncode != 2 or needle not in err:
                problems.append("--out %s: exit %d, stderr %r" % (out, r.returncode, err))
        if not stat.S_ISFIFO(os.lstat(os.path.join(d, "o.fifo")).st_mode):
            problems.append("--out o.fifo: the FIFO was replaced")
        if not os.path.islink(os.path.join(d, "dangling.npy")) or os.path.exists(
                os.path.join(d, "missing.npy")):
            problems.append("--out dangling.npy: the link or its target was written")
        target = os.path.join(d, "target.npy")
        with open(target, "wb") as f:
            f.write(OLD_O)
        os.chmod(target, 0o600)
        os.symlink("target.npy", os.path.join(d, "link.npy"))
        r = run(fai, d, with_arg(BASE, "--out", "link.npy"))
        with open(target, "rb") as f:
            data = f.read()
        if r.returncode != 0 or not data.startswith(b"\x93NUMPY"):
            problems.append("--out link.npy: exit %d, stderr %r, target starts %r" % (
                r.returncode, r.stderr, data[:8]))
        if not os.path.islink(os.path.join(d, "link.npy")):
            problems.append("--out link.npy: the link was replaced by a file")
        if stat.S_IMODE(os.stat(target).st_mode) != 0o600:
            problems.append("--out link.npy: the target's permissions changed to %o" %
                            stat.S_IMODE(os.stat(target).st_mode))
        long_name = "o" * (os.pathconf(d, "PC_NAME_MAX") - 4) + ".npy"
        r = run(fai, d, with_arg(BASE, "--out", long_name))
        if r.returncode != 0 or not os.path.exists(os.path.join(d, long_name)):
            problems.append("--out with a %d-byte name: exit %d, stderr %r" % (
                len(long_name), r.returncode, r.stderr))
        stray = [n for n in os.listdir(d) if n.startswith(".")]
        if stray:
            problems.append("temporary files left: %s" % stray)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return problems


def unreplaceable_outputs(fai):
    """An output the user could not replace is refused before anything is computed or written:
    an existing file of another user in a sticky directory (such as /tmp), and a directory the
    user cannot make a file in. Root may do both, so as root the tool runs as nobody; without
    root no file of another user can be made, and that case is skipped. Returns (problems,
    skipped cases with the reason)."""
    problems, skipped = [], []
    as_root = os.geteuid() == 0
    if as_root and sys.version_info < (3, 9):
        return problems, ["unreplaceable outputs: running as another user needs Python 3.9"]
    nobody = {"user": 65534, "group": 65534, "extra_groups": []} if as_root else {}

    def refused(label, d, args, needle, outputs):
        """args run in d must exit 2 naming needle, leaving `outputs` (name: old bytes or None
        for absent) as they were and no temporary file."""
        before = sorted(os.listdir(d))
        r = subprocess.run([fai, "run"] + args, cwd=d, capture_output=True, timeout=120,
                           **nobody)
        err = r.stderr.decode("utf-8", "replace")
        # a coverage build's runtime says on stderr that another user may not write its
        # counters: not the tool's words
        err = "".join(line for line in err.splitlines(keepends=True)
                      if not line.startswith("profiling:"))
        if r.returncode != 2 or needle not in err or err.count("\n") != 1:
            problems.append("%s: exit %d, stderr %r (expected 2 and %r)" % (
                label, r.returncode, err, needle))
        for fname, data in outputs.items():
            path = os.path.join(d, fname)
            if data is None and os.path.exists(path):
                problems.append("%s: %s was written" % (label, fname))
            elif data is not None and open(path, "rb").read() != data:
                problems.append("%s: %s was changed" % (label, fname))
        if sorted(os.listdir(d)) != before:
            problems.append("%s: directory changed: %s -> %s" % (
                label, before, sorted(os.listdir(d))))

    d = tempfile.mkdtemp(prefix="fai_unreplaceable_")
    try:
        write_files(d, GOOD)
        if as_root:  # another user's sticky directory, like /tmp, holding root's LSE
            os.chmod(d, 0o1777)
            write_files(d, {"lse.npy": OLD_LSE})
            refused("--lse of another user in a sticky directory", d,
                    BASE + ["--lse", "lse.npy"], "--lse lse.npy: belongs to another user",
                    {"o.npy": None, "lse.npy": OLD_LSE})
        else:
            skipped.append("--lse of another user in a sticky directory: needs root to make "
                           "that user's file (the tool then runs as nobody)")
        os.chmod(d, 0o777 if as_root else 0o755)  # --out there is writable, for nobody too
        ro = os.path.join(d, "ro")
        os.mkdir(ro)
        write_files(ro, {"lse.npy": OLD_LSE})
        os.chmod(ro, 0o555)
        # a --q that is missing: refused for the output first, so before reading any input
        refused("--lse in a directory without write permission", d,
                with_arg(BASE, "--q", "missing.npy") + ["--lse", "ro/lse.npy"],
                "--lse ro/lse.npy: cannot create a file in its directory",
                {"o.npy": None})
        if open(os.path.join(ro, "lse.npy"), "rb").read() != OLD_LSE:
            problems.append("ro/lse.npy was changed")
    finally:
        for root, dirs, _ in os.walk(d):
            for sub in dirs:
                os.chmod(os.path.join(root, sub), 0o755)
        shutil.rmtree(d, ignore_errors=True)
    return problems, skipped


def main():
    fai = fai_from_argv("test_run_badinput")
    passed = failed = 0
    for why in sanity(fai) + streams(fai) + special_outputs(fai):
        print("FAIL sanity: %s" % why)
        failed += 1
    if not failed:
        print("ok   sanity (good inputs succeed, quantized too, --help, inputs from pipes, "
              "outputs through links, long names)")
        passed += 1
    problems, skipped = unreplaceable_outputs(fai)
    for why in skipped:
        print("skip %s" % why)
    for why in problems:
        print("FAIL unreplaceable outputs: %s" % why)
    if problems:
        failed += 1
    else:
        print("ok   unreplaceable outputs refused before running")
        passed += 1
    for name, files, args, needle in CASES:
        reasons = []
        for pre in (True, False):
            why = one_case(fai, name, files, args, needle, pre)
            if why:
                reasons.append("%s outputs: %s" % ("existing" if pre else "absent", why))
        if reasons:
            failed += 1
            print("FAIL %s: %s" % (name, " | ".join(reasons)))
        else:
            passed += 1
            print("ok   %s" % name)
        sys.stdout.flush()
    print("run_badinput: %d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
