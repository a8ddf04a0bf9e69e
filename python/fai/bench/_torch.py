"""torch SDPA, in the layout torch prefers (see the package's docstring)."""


def setup_torch(case, threads, bf16):
    import torch

    F = torch.nn.functional
    torch.set_num_threads(threads)
    dt = torch.bfloat16 if bf16 else torch.float32
    B, Hq, Hkv, Sq, Skv, D, G = case.B, case.Hq, case.Hkv, case.Sq, case.Skv, case.D, case.group
    q = torch.from_numpy(case.q32).to(dt).transpose(1, 2).contiguous()  # [B, Hq, Sq, D]
    k = torch.from_numpy(case.k32).to(dt).transpose(1, 2).contiguous()  # [B, Hkv, Skv, D]
    v = torch.from_numpy(case.v32).to(dt).transpose(1, 2).contiguous()
    kw = {}
    fold = G > 1 and Sq < 64
    how = []
    if case.causal and Sq == Skv:
        kw["is_causal"] = True
        how.append("is_causal")
    elif case.causal:
        keep = torch.from_numpy(case.bottom_right_keep())
        kw["attn_mask"] = keep.repeat(G, 1) if fold else keep
        how.append("bottom-right bool mask")
    if fold:
        q = q.reshape(B, Hkv, G * Sq, D)  # rows (g, i): head h = kv*G + g
        how.append("group folded into queries")
    elif G > 1:
        try:
            F.scaled_dot_product_attention(q[:, :, :1], k[:, :, :1], v[:, :, :1],
                                           enable_gqa=True)
            kw["enable_gqa"] = True
            how.append("enable_gqa")
        except TypeError:
            k = k.repeat_interleave(G, dim=1)
            v = v.repeat_interleave(G, dim=1)
            how.append("K/V repeated")

    def call():
        with torch.inference_mode():
            return F.scaled_dot_product_attention(q, k, v, **kw)

    return (call, lambda out: out.reshape(B, Hq, Sq, D).transpose(1, 2).float().numpy(),
            ", ".join(how) or "plain")
