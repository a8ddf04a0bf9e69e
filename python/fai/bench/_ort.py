"""ONNX Runtime's com.microsoft attention contrib ops (see the package's docstring)."""
import numpy as np


def setup_ort(case, threads, bf16):
    if bf16:
        raise RuntimeError("no bf16 CPU kernel for these contrib ops")
    import onnxruntime as ort
    from onnx import TensorProto, helper

    B, Hq, Hkv, Sq, Skv, D = case.B, case.Hq, case.Hkv, case.Sq, case.Skv, case.D
    f32 = TensorProto.FLOAT
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    q = np.ascontiguousarray(case.q32.reshape(B, Sq, Hq * D))

    def model(nodes, inputs, outputs):
        graph = helper.make_graph(nodes, "attention", inputs, outputs)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
        m.ir_version = 10
        return ort.InferenceSession(m.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])

    if Hq == Hkv and not case.causal:
        node = helper.make_node("MultiHeadAttention", ["query", "key", "value"], ["output"],
                                domain="com.microsoft", num_heads=Hq)
        inputs = [helper.make_tensor_value_info(n, f32, [B, s, h * D])
                  for n, s, h in (("query", Sq, Hq), ("key", Skv, Hkv), ("value", Skv, Hkv))]
        sess = model([node], inputs, [helper.make_tensor_value_info("output", f32,
                                                                    [B, Sq, Hq * D])])
        feeds = {"query": q, "key": np.ascontiguousarray(case.k32.reshape(B, Skv, Hkv * D)),
                 "value": np.ascontiguousarray(case.v32.reshape(B, Skv, Hkv * D))}
        return (lambda: sess.run(["output"], feeds)[0], lambda out: out.reshape(B, Sq, Hq, D),
                "MultiHeadAttention")

    if not case.causal and Sq != 1:
        raise RuntimeError("GroupQueryAttention is always causal")
    # GroupQueryAttention: the last Sq keys are the new tokens, the others the past (BNSH)
    past = Skv - Sq
    node = helper.make_node(
        "GroupQueryAttention",
        ["query", "key", "value", "past_key", "past_value", "seqlens_k",
         "total_sequence_length"],
        ["output", "present_key", "present_value"], domain="com.microsoft", num_heads=Hq,
        kv_num_heads=Hkv)
    # ONNX Runtime takes batch 1 only when several new tokens meet a past: then one call per
    # sequence, timed together
    per_seq = B > 1 and Sq > 1 and past > 0
    nb = 1 if per_seq else B
    inputs = [helper.make_tensor_value_info("query", f32, [nb, Sq, Hq * D]),
              helper.make_tensor_value_info("key", f32, [nb, Sq, Hkv * D]),
              helper.make_tensor_value_info("value", f32, [nb, Sq, Hkv * D]),
              helper.make_tensor_value_info("past_key", f32, [nb, Hkv, Skv, D]),
              helper.make_tensor_value_info("past_value", f32, [nb, Hkv, Skv, D]),
              helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [nb]),
              helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [])]
    outputs = [helper.make_tensor_value_info("output", f32, [nb, Sq, Hq * D]),
               helper.make_tensor_value_info("present_key", f32, [nb, Hkv, Skv, D]),
               helper.make_tensor_value_info("present_value", f32, [nb, Hkv, Skv, D])]
    sess = model([node], inputs, outputs)
    k_bnsh = np.ascontiguousarray(case.k32.transpose(0, 2, 1, 3))
    v_bnsh = np.ascontiguousarray(case.v32.transpose(0, 2, 1, 3))
    bindings = []
    keep = []
    for b0 in range(0, B, nb):
        sl = slice(b0, b0 + nb)
        # past_key and present_key are one buffer of Skv positions (ONNX Runtime then appends
        # the new tokens in place): the first `past` hold the past, the new keys go after them
        pk = ort.OrtValue.ortvalue_from_numpy(k_bnsh[sl].copy())
        pv = ort.OrtValue.ortvalue_from_numpy(v_bnsh[sl].copy())
        feeds = {"query": np.ascontiguousarray(q[sl]),
                 "key": np.ascontiguousarray(case.k32[sl, past:].reshape(nb, Sq, Hkv * D)),
                 "value": np.ascontiguousarray(case.v32[sl, past:].reshape(nb, Sq, Hkv * D)),
                 "seqlens_k": np.full(nb, Skv - 1, np.int32),
                 "total_sequence_length": np.array(Skv, np.int32)}
        binding = sess.io_binding()
        for name, arr in feeds.items():
            binding.bind_cpu_input(name, arr)
        binding.bind_ortvalue_input("past_key", pk)
        binding.bind_ortvalue_input("past_value", pv)
        binding.bind_output("output", "cpu")
        binding.bind_ortvalue_output("present_key", pk)
        binding.bind_ortvalue_output("present_value", pv)
        bindings.append(binding)
        keep.append((pk, pv, feeds))

    def call():
        outs = []
        for binding in bindings:
            sess.run_with_iobinding(binding)
            outs.append(binding.get_outputs()[0].numpy())
        return np.concatenate(outs) if len(outs) > 1 else outs[0]

    return (call, lambda out: out.reshape(B, Sq, Hq, D),
            "GroupQueryAttention, shared past/present buffer"
            + (f", one call per sequence ({B})" if per_seq else ""))
