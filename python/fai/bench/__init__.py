"""python -m fai.bench: fai against PyTorch SDPA, ONNX Runtime and OpenVINO on the benchmark shapes.

    python -m fai.bench [P1 P2 D1 D2 C1] [--threads 2] [--runs 10] [--bf16] [--plot out.png]

Every library runs the same attention on the same values in one process, with the same thread
count (at most fai.cpu_count(), the most fai runs on; OpenMP threads told to sleep when idle,
OMP_WAIT_POLICY=PASSIVE unless set, since the libraries take turns): median (and min) of --runs
timed calls after --warmup untimed ones, the libraries taking turns call by call so that a shared
machine's load weighs on all of them alike. With --cold, a buffer of at least 1 GiB is read
before every call (untimed), so that decode reads its K/V from memory, as a serving engine's next
step does, and not from what the last call left in a large L3. Each peer's output is compared
with fai's (max |diff|, tolerance 1e-3, 2e-2 with --bf16): a peer whose output differs keeps its
time in the table, marked '!', and its note says OUTPUT DIFFERS with the difference. A peer that
raises (in its setup, a warm-up, a timed call or reading its output) is shown as n/a, its note
giving the error. Peers that are not installed are left out of the table; the package's bench
extra installs them all (pip install './python[bench]').

Data types: by default fai reads Q f32, K/V f16 and writes O f32 (the headline configuration).
The peers' attention needs one dtype for Q, K and V, so they get the same values in f32 (f16
values are exact in f32); OpenVINO is told to compute in f32 (INFERENCE_PRECISION_HINT), since it
would pick bf16 on CPUs that have it. With --bf16 everything is bf16: torch in bf16, OpenVINO
with its bf16 precision hint (f32 tensors in and out), ONNX Runtime has no bf16 CPU kernel.

Layouts: fai reads the paged shapes (D1 D2 C1) through a shuffled block table, from a cache
made by fai.empty_cache, as a server using fai keeps it (huge pages asked for: a kv head's rows
of a token-major page lie a whole token apart, and on 4 KiB pages every other row needs its own
TLB entry; --numpy-kv puts them in plain numpy arrays instead); no peer has a paged KV cache on CPU,
so they get the equivalent dense K/V. Each peer gets its preferred layout
built outside the timed region:
  torch    SDPA on [B, H, S, D]; GQA: K/V repeated to Hq heads for prefill (enable_gqa where
           this torch has it), and for short queries the Hq/Hkv group folded into the query axis
           ([B, Hkv, G*Sq, D]: exact, no K/V copy). Causal: is_causal (top-left) where Sq == Skv,
           else the bottom-right mask as a boolean attn_mask.
  ORT      com.microsoft GroupQueryAttention (GQA shapes: the last Sq keys as new tokens, the
           rest as the past cache in BNSH, bound as a shared past/present buffer, which is how
           ONNX Runtime decodes in place), MultiHeadAttention for P2 (no GQA, not causal).
  OpenVINO opset13 ScaledDotProductAttention on [B, H, S, D], inputs shared, not copied (GQA:
           K/V repeated for square causal prefill, otherwise a kv-head axis broadcast over the
           group, [B, Hkv, G, Sq, D] against [B, Hkv, 1, Skv, D]; bottom-right masks explicit).
"""
# Nothing is imported here: `import fai` and `import fai.bench` load no peer. __main__ runs the
# command; each peer's module imports its library only when the peer is set up.
