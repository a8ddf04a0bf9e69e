"""A float64 numpy reference of fai's operator (DESIGN section 1), written independently of the
library: per sequence, per head, the visible keys under lengths, causal alignment, window and
explicit masks, then a plain softmax. Fully masked rows and rows past a length: O = 0, LSE = -inf.
"""
import numpy as np

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
    FP8 = {"float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
           "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2)}
except ImportError:  # pragma: no cover - depends on the environment
    ml_dtypes = None
    BF16 = None
    FP8 = {}

# largest finite code of the quantized K/V dtypes
QMAX = {"int8": 127.0, "float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}

# error bound of rounding a 16-bit output to nearest, relative to the value: half an ulp
OUT_STEP = {"float32": 0.0, "float16": 2.0**-11, "bfloat16": 2.0**-8}

# the f32 rounding term of the tolerance (README, "Tolerances"): ROUNDING x eps x (L + sqrt(n))
EPS_F32 = 2.0**-23
ROUNDING = 2.0


class Ref(tuple):
    """(O, LSE) of attention_ref, with what the tolerance of each element scales with:
    o_scale = max(1, sum_j p_j |v_j|), lse_scale = max(1, |LSE|), and the rounding term
    o_slack (per O element) and lse_slack (per LSE element) = ROUNDING x eps x (L + sqrt(n)),
    L the row's largest logit magnitude |scale| sum_d |q_d k_d| (+ |add|), n its visible keys."""

    def __new__(cls, o, lse, o_scale, o_slack, lse_slack):
        r = super().__new__(cls, (o, lse))
        r.o_scale, r.o_slack = o_scale, o_slack
        r.lse_scale = np.maximum(1.0, np.where(np.isfinite(lse), np.abs(lse), 0.0))
        r.lse_slack = lse_slack
        return r


def np_dtype(name):
    if name == "bfloat16":
        return BF16
    if name in FP8:
        return FP8[name]
    return np.dtype(name)


def quantize(rng, x, dtype, kind):
    """x float64 [..., H, D] (NaN in slots never read) as a quantized K or V: codes of dtype
    ('int8', 'float8_e4m3fn', 'float8_e5m2') and float32 scales of kind 'token' ([..., H], one
    per row), 'head' ([H]) or 'tensor' ([]), drawn a little above max |x| / qmax so that the codes
    use most of their range. Returns (codes, scales, values): values = code x scale in float64,
    exactly what fai reads (NaN in the rows of NaN, whose per-token scales are NaN)."""
    mag = np.abs(x)
    if kind == "token":
        amax = mag.max(axis=-1)
    elif kind == "head":
        amax = np.nanmax(mag, axis=tuple(range(x.ndim - 2)) + (x.ndim - 1,))
    else:
        amax = np.float64(np.nanmax(mag))
    amax = np.where(amax == 0, 1.0, amax)
    scales = (amax / QMAX[dtype] * rng.uniform(1.0, 1.25, np.shape(amax))).astype(np.float32)
    per_row = (scales[..., None] if kind == "token" else scales[:, None] if kind == "head"
               else scales).astype(np.float64)
    y = np.nan_to_num(x / per_row)
    if dtype == "int8":
        codes = np.clip(np.rint(y), -127, 127).astype(np.int8)
    else:
        codes = y.astype(np_dtype(dtype))  # rounded to nearest even
    return codes, scales, codes.astype(np.float64) * per_row


def cast(x, name):
    """x rounded to dtype `name` (the array handed to fai) and its float64 values."""
    a = np.asarray(x, dtype=np.float64).astype(np.float32).astype(np_dtype(name))
    return a, a.astype(np.float32).astype(np.float64)


def values(a):
    return np.asarray(a).astype(np.float32).astype(np.float64)


def visible(lq, lk, Sq, Skv, causal, window):
    """[Sq, Skv] bool: which (query, key) positions a sequence of lq queries and lk keys sees,
    before explicit masks (queries past lq see nothing)."""
    i = np.arange(Sq)[:, None]
    j = np.arange(Skv)[None, :]
    vis = (i < lq) & (j < lk)
    diag = i if causal == "top_left" else i + (lk - lq)
    if causal is not None:
        vis &= j <= diag
    left, right = window if window is not None else (-1, -1)
    if causal is not None:
        right = 0
    if left is not None and left >= 0:
        vis &= j >= diag - left
    if right is not None and right >= 0:
        vis &= j <= diag + right
    return vis


def attention_ref(q, k, v, *, causal=None, window=None, keep=None, add=None, scale=None,
                  seqlens_q=None, seqlens_kv=None, softcap=None, alibi_slopes=None, sinks=None):
    """Padded batch: q [B, Sq, Hq, D], k [B, Skv, Hkv, D], v [B, Skv, Hkv, Dv] float64.
    causal: None, 'bottom_right', 'top_left'. keep: bool broadcastable to [B, Hq, Sq, Skv];
    add: float broadcastable to the same. softcap: s <- c tanh(s / c); alibi_slopes [Hq]:
    s -= slope |j - diag(i)|; sinks [Hq]: exp(sink) joins the denominator (a row that sees
    nothing gets LSE = sink). Returns O [B, Sq, Hq, Dv], LSE [B, Hq, Sq]."""
    B, Sq, Hq, D = q.shape
    Skv, Hkv, Dv = k.shape[1], k.shape[2], v.shape[3]
    G = Hq // Hkv
    if scale is None:
        scale = 1.0 / np.sqrt(D)
    o = np.zeros((B, Sq, Hq, Dv))
    lse = np.full((B, Hq, Sq), -np.inf)
    o_scale = np.ones((B, Sq, Hq, Dv))
    slack = np.zeros((B, Hq, Sq))
    keep_b = None if keep is None else np.broadcast_to(keep, (B, Hq, Sq, Skv))
    add_b = None if add is None else np.broadcast_to(np.asarray(add, np.float64), (B, Hq, Sq, Skv))
    for b in range(B):
        lq = Sq if seqlens_q is None else int(seqlens_q[b])
        lk = Skv if seqlens_kv is None else int(seqlens_kv[b])
        vis0 = visible(lq, lk, Sq, Skv, causal, window)
        i_pos = np.arange(Sq)[:, None] + (0 if causal == "top_left" else lk - lq)
        dist = np.abs(np.arange(Skv)[None, :] - i_pos).astype(np.float64)
        for h in range(Hq):
            kh = h // G
            s = scale * (q[b, :, h, :] @ k[b, :, kh, :].T)
            mag = abs(scale) * (np.abs(q[b, :, h, :]) @ np.abs(k[b, :, kh, :]).T)
            if softcap:
                raw = s
                s = softcap * np.tanh(raw / softcap)
                mag = mag / np.cosh(raw / softcap) ** 2 + 2.0 * np.abs(s)
            if alibi_slopes is not None:
                bias = float(alibi_slopes[h]) * dist
                s = s - bias
                mag = mag + np.abs(bias)
            sink = -np.inf if sinks is None else float(sinks[h])
            vis = vis0.copy()
            if keep_b is not None:
                vis &= keep_b[b, h]
            if add_b is not None:
                s = s + add_b[b, h]
                vis &= ~np.isneginf(s)
                mag = mag + np.where(vis, np.abs(add_b[b, h]), 0.0)
            s = np.where(vis, s, -np.inf)
            for i in range(Sq):
                row = s[i]
                if not vis[i].any():
                    if i < lq:
                        lse[b, h, i] = sink
                    continue
                m = max(row[vis[i]].max(), sink)
                p = np.where(vis[i], np.exp(row - m), 0.0)
                total = p.sum() + np.exp(sink - m)
                vk = np.where(vis[i][:, None], v[b, :, kh, :], 0.0)  # invisible V never counts
                o[b, i, h] = (p @ vk) / total
                o_scale[b, i, h] = np.maximum(1.0, (p @ np.abs(vk)) / total)
                lse[b, h, i] = m + np.log(total)
                top = max(mag[i][vis[i]].max(), abs(sink) if np.isfinite(sink) else 0.0)
                slack[b, h, i] = ROUNDING * EPS_F32 * (top + np.sqrt(vis[i].sum()))
    o_slack = np.broadcast_to(np.transpose(slack, (0, 2, 1))[..., None], o.shape)
    return Ref(o, lse, o_scale, o_slack, slack)


def assert_close(out, ref, in_tol, out_dtype="float32", what="O"):
    """The tolerance of the README: max |err| <= (in_tol + ROUNDING eps (L + sqrt(n))) x
    max(1, sum_j p_j |v_j|) for O (x max(1, |LSE|) for the LSE), plus the output's rounding to
    nearest (half a step of its type), when ref is a Ref (in_tol: the dtype term of tolerance()). A plain array ref is compared
    with in_tol x max(1, |ref|) alone: stricter than the bound wherever |V| <= 1 and in_tol
    covers the logits' rounding (16-bit inputs, small logits)."""
    slack = 0.0
    if isinstance(ref, Ref):
        if what == "LSE":
            scale, slack, ref = ref.lse_scale, ref.lse_slack, ref[1]
        else:
            scale, slack, ref = ref.o_scale, ref.o_slack, ref[0]
    got = values(out)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    assert np.all(np.isfinite(got) == np.isfinite(ref)) or what == "LSE", f"{what}: finiteness"
    if what == "LSE":
        inf_ref = np.isneginf(ref)
        assert np.array_equal(np.isneginf(got), inf_ref), f"{what}: -inf rows differ"
        got = np.where(inf_ref, 0.0, got)
        ref = np.where(inf_ref, 0.0, ref)
    if isinstance(slack, float):
        scale = np.maximum(1.0, np.abs(ref))
    bound = (in_tol + slack) * scale + OUT_STEP[out_dtype] * np.abs(ref)
    err = np.abs(got - ref)
    worst = np.unravel_index(np.argmax(err - bound), err.shape) if err.size else None
    assert np.all(err <= bound), (f"{what}: max error {err.max():.3g} at {worst}, "
                                  f"bound {bound[worst]:.3g}, ref {ref[worst]:.6g}, "
                                  f"got {got[worst]:.6g}")


def tolerance(*dtypes):
    """The dtype term of the tolerance: 0 with f32 inputs (the rounding term of a Ref covers
    them), 2^-14 as soon as one input is 16-bit or quantized."""
    return 0.0 if all(d == "float32" for d in dtypes) else 2.0 ** -14
