"""OpenVINO's opset13 ScaledDotProductAttention (see the package's docstring)."""
import numpy as np


def setup_openvino(case, threads, bf16):
    import openvino as ov

    try:
        from openvino import opset13 as ops
    except ImportError:  # older releases
        from openvino.runtime import opset13 as ops
    B, Hq, Hkv, Sq, Skv, D, G = case.B, case.Hq, case.Hkv, case.Sq, case.Skv, case.D, case.group
    q = np.ascontiguousarray(case.q32.transpose(0, 2, 1, 3))  # [B, Hq, Sq, D]
    k = np.ascontiguousarray(case.k32.transpose(0, 2, 1, 3))  # [B, Hkv, Skv, D]
    v = np.ascontiguousarray(case.v32.transpose(0, 2, 1, 3))
    # GQA: K/V repeated for square causal prefill (the causal flag's fast path), otherwise a
    # kv-head axis that broadcasts over the group ([B, Hkv, G, Sq, D] against [B, Hkv, 1, S, D])
    how = []
    if G > 1 and case.causal and Sq == Skv:
        k = np.ascontiguousarray(np.repeat(k, G, axis=1))
        v = np.ascontiguousarray(np.repeat(v, G, axis=1))
        how.append("K/V repeated")
    elif G > 1:
        q = q.reshape(B, Hkv, G, Sq, D)
        k = k[:, :, None]
        v = v[:, :, None]
        how.append("group axis broadcast (5-D)")
    params = [ops.parameter(list(a.shape), ov.Type.f32, name=n)
              for n, a in (("q", q), ("k", k), ("v", v))]
    args = list(params)
    causal_flag = False
    if case.causal and Sq == Skv:
        causal_flag = True
        how.append("causal=True")
    elif case.causal:
        args.append(ops.constant(case.bottom_right_keep()))
        how.append("bottom-right bool mask")
    node = ops.scaled_dot_product_attention(*args, causal=causal_flag)
    model = ov.Model([node], params, "attention")
    config = {"INFERENCE_NUM_THREADS": threads,
              "INFERENCE_PRECISION_HINT": "bf16" if bf16 else "f32"}
    compiled = ov.Core().compile_model(model, "CPU", config)
    request = compiled.create_infer_request()
    feeds = {"q": q, "k": k, "v": v}

    def call():
        request.infer(feeds, share_inputs=True)  # read the arrays in place, as fai does
        return request.get_output_tensor(0).data

    return (call, lambda out: np.array(out).reshape(B, Hq, Sq, D).transpose(0, 2, 1, 3),
            ", ".join(how) or "plain")
