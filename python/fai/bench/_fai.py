"""fai's side of a run: a plan made once, its output array allocated once."""
import statistics
import time

import numpy as np

import fai


# plan info p_parts: how O = P V multiplies P
_P_PARTS = {0: "P not rounded (PV in f32)", 1: "P rounded to bf16", 2: "P in bf16 hi + lo"}


def setup_fai(case, threads, bf16, round_p_bf16=False):
    """A peer's setup (see _peers), plus the plan's own time in the note: fai plans once per
    shape, and what that costs belongs next to the run's time."""
    def make_plan():
        return fai.Plan.like(case.q, case.k, case.v, threads=threads,
                             out_dtype=case.out_dtype, round_p_bf16=round_p_bf16, **case.kw)

    make_plan().close()  # the first plan of a process also starts fai's thread pool
    plan_times = []
    for _ in range(5):
        t0 = time.perf_counter()
        plan = make_plan()
        plan_times.append((time.perf_counter() - t0) * 1e3)
        plan.close()
    plan_ms = statistics.median(plan_times)
    plan = make_plan()
    bt = case.kw.get("block_table")
    info = plan.info
    note = f"plan {plan_ms:.2f} ms, {info['workers']} workers, isa {info['isa']}"
    if round_p_bf16:  # asked for; whether it applies depends on the path the plan takes
        note += f", {_P_PARTS.get(info['p_parts'], 'p_parts %d' % info['p_parts'])}"
    # the output allocated once, as a serving engine holds it (a fresh array per call would
    # time the kernel's first touch of its pages, which torch's caching allocator never pays)
    out = np.empty(case.q.shape[:3] + (case.D,), case.q.dtype if bf16 else np.float32)
    return (lambda: plan.run(case.q, case.k, case.v, block_table=bt, out=out),
            lambda o: np.asarray(o, np.float32).copy(), note)
