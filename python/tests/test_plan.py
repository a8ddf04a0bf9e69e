"""fai.Plan (reuse, info, shapes checked at run time, threads, concurrent runs, empty
problems) and fai.merge_states."""
import threading
import time

import numpy as np
import pytest

import fai
from cases import DTYPES, paginate, qkv
from reference import BF16, OUT_STEP, assert_close, attention_ref, tolerance, values

# -- Plan ---------------------------------------------------------------------------------------

def test_plan_reuse_and_info():
    rng = np.random.default_rng(18)
    (q, k, v), _ = qkv(rng, 2, 16, 64, 8, 2, 32)
    plan = fai.Plan.like(q, k, v, causal=True)
    info = plan.info
    for key in ("tile_q", "tile_kv", "units", "workers", "threads", "imbalance",
                "workspace_bytes", "split_kv", "isa"):
        assert key in info, key
    assert info["workspace_bytes"] == plan.workspace_bytes
    # f32 Q with f16 K/V: PV in f32 on every vector table, P as hi + lo on the matrix engine
    assert info["p_parts"] == (2 if info["isa"].startswith("amx") else 0)
    # kv tiles in flight: 1 or 2 on the matrix engine (fai_problem.pipeline_tiles), else 1
    assert info["pipeline_tiles"] in ((1, 2) if info["isa"].startswith("amx") else (1,))
    assert info["l1d_capacity"] == fai.cpu_cache_bytes(1)
    assert info["l2_capacity"] == fai.cpu_cache_bytes(2)
    assert fai.cpu_cache_bytes(3) >= 0 and fai.cpu_cache_bytes(4) == 0
    ranges = plan.worker_ranges()
    assert len(ranges) == info["workers"]
    assert ranges[-1]["line_end"] == info["total_weight"]
    assert plan.unit(0)["heads_q"] >= 1
    for step in range(3):  # the same plan, new data each "layer"
        (q, k, v), refs = qkv(rng, 2, 16, 64, 8, 2, 32)
        o = plan.run(q, k, v)
        assert_close(o, attention_ref(*refs, causal="bottom_right"),
                     tolerance(q.dtype.name, k.dtype.name, v.dtype.name))
    plan.close()
    with pytest.raises(fai.FaiError, match="closed"):
        plan.run(q, k, v)


def test_plan_from_shapes_paged_decode():
    rng = np.random.default_rng(19)
    B, Hq, Hkv, D, ps = 2, 8, 2, 64, 16
    (q, k, v), (q64, k64, v64) = qkv(rng, B, 1, 64, Hq, Hkv, D)
    lk = [64, 30]
    kp, vp, bt = paginate(rng, k, v, lk, ps)
    with fai.Plan(B, Hq, Hkv, 1, None, D, q_dtype="float32", k_dtype="float16",
                  seqlens_kv=lk, page_size=ps, num_pages=kp.shape[0],
                  pages_per_seq=bt.shape[1], workers=4, threads=2) as plan:
        assert plan.info["workers"] == 4
        o, lse = plan.run(q, kp, vp, block_table=bt, return_lse=True)
        ref = attention_ref(q64, k64, v64, seqlens_kv=lk)
        tol = tolerance(q.dtype.name, k.dtype.name, v.dtype.name)
        assert_close(o, ref, tol)
        assert_close(lse, ref, tol, what="LSE")
        with pytest.raises(fai.FaiError, match="block_table is required"):
            plan.run(q, kp, vp)
        with pytest.raises(fai.FaiError, match="dtype"):
            plan.run(q.astype(np.float16), kp, vp, block_table=bt)
    with fai.Plan(B, Hq, Hkv, 1, None, D, seqlens_kv=lk, page_size=ps, num_pages=kp.shape[0],
                  pages_per_seq=bt.shape[1], workers=4, trust_block_table=True) as trusted:
        assert np.array_equal(trusted.run(q, kp, vp, block_table=bt), o)


def test_plan_run_checks_shapes_and_masks():
    rng = np.random.default_rng(20)
    (q, k, v), _ = qkv(rng, 1, 4, 8, 2, 2, 8)
    plan = fai.Plan.like(q, k, v, mask_kind="keep")
    with pytest.raises(fai.FaiError, match="q has shape"):
        plan.run(q[:, :3], k, v, mask=np.ones((4, 8), bool))
    with pytest.raises(fai.FaiError, match="mask, which is missing"):
        plan.run(q, k, v)
    with pytest.raises(fai.FaiError, match="mask has shape"):
        plan.run(q, k, v, mask=np.ones((4, 7), bool))
    assert plan.run(q, k, v, mask=np.ones((4, 8), bool)).shape == (1, 4, 2, 8)


def test_threads_do_not_change_the_result():
    rng = np.random.default_rng(21)
    (q, k, v), _ = qkv(rng, 1, 33, 300, 8, 2, 64)
    one = fai.attention(q, k, v, causal=True, threads=1, workers=6)
    two = fai.attention(q, k, v, causal=True, threads=2, workers=6)
    assert np.array_equal(one, two)


def test_concurrent_runs_of_one_plan():
    rng = np.random.default_rng(22)
    (q, k, v), refs = qkv(rng, 2, 16, 40, 4, 2, 32)
    plan = fai.Plan.like(q, k, v, threads=1)
    want = attention_ref(*refs)
    tol = tolerance(q.dtype.name, k.dtype.name, v.dtype.name)
    errors = []

    def work():
        try:
            for _ in range(20):
                assert_close(plan.run(q, k, v), want, tol)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_close_during_a_run_waits_for_it():
    # ctypes lets other threads run while libfai works: close() on one must not free the plan
    # under a run on another (a run of ~0.1 s on one thread, close() called 30 ms into it)
    rng = np.random.default_rng(26)
    q = rng.standard_normal((1, 2048, 8, 64), dtype=np.float32)
    k = rng.standard_normal((1, 2048, 8, 64), dtype=np.float32)
    want = fai.attention(q, k, k, threads=1)
    plan = fai.Plan.like(q, k, k, threads=1)
    got = {}

    def run():
        try:
            got["out"] = plan.run(q, k, k)
        except fai.FaiError as exc:
            got["error"] = exc

    runner = threading.Thread(target=run)
    runner.start()
    time.sleep(0.03)
    plan.close()
    runner.join()
    if "error" in got:  # close() came first after all: the run was refused, nothing ran
        assert "the plan is closed" in str(got["error"])
    else:
        assert np.array_equal(got["out"], want)
    with pytest.raises(fai.FaiError, match="the plan is closed"):
        plan.run(q, k, k)
    with pytest.raises(fai.FaiError, match="the plan is closed"):
        plan.info


def test_paged_plan_refuses_a_seq_kv_it_would_ignore():
    # libfai reads a paged plan's keys from its pages: a seq_kv other than pages_per_seq x
    # page_size would change nothing, so it is refused rather than ignored
    pages = dict(page_size=16, num_pages=8, pages_per_seq=4, seqlens_kv=[40])
    with pytest.raises(fai.FaiError, match=r"seq_kv = 40: a paged plan's keys are its pages, "
                       r"pages_per_seq x page_size = 4 x 16 = 64; give that or None"):
        fai.Plan(1, 2, 2, 1, 40, 8, **pages)
    with pytest.raises(fai.FaiError, match="seq_kv = 64.0"):
        fai.Plan(1, 2, 2, 1, 64.0, 8, **pages)
    for seq_kv in (None, 64, np.int64(64)):
        with fai.Plan(1, 2, 2, 1, seq_kv, 8, **pages) as plan:
            assert "seq_kv=64" in repr(plan)


def test_plan_run_names_the_dtype_given():
    # a float64 q is read as float32; refused by a float16 plan, it is named as given
    q = np.zeros((1, 2, 2, 8))
    k = np.zeros((1, 3, 2, 8), np.float16)
    plan = fai.Plan(1, 2, 2, 2, 3, 8, q_dtype="float16")
    with pytest.raises(fai.FaiError, match="q has dtype float64; the plan's is float16"):
        plan.run(q, k, k)


def test_empty_problems():
    q = np.zeros((0, 4, 2, 8), np.float32)
    k = np.zeros((0, 5, 2, 8), np.float16)
    o, lse = fai.attention(q, k, k, return_lse=True)
    assert o.shape == (0, 4, 2, 8) and lse.shape == (0, 2, 4)
    rng = np.random.default_rng(23)
    (q, k, v), _ = qkv(rng, 2, 3, 4, 2, 2, 8)
    o, lse = fai.attention(q, k, v, seqlens_kv=[0, 0], return_lse=True)
    assert np.all(o == 0) and np.all(np.isneginf(lse))

# -- merge_states -------------------------------------------------------------------------------

@pytest.mark.parametrize("part_dtype", DTYPES)
def test_merge_states_equals_attention_over_the_union(part_dtype):
    rng = np.random.default_rng(24)
    B, Sq, Skv, Hq, Hkv, D = 2, 5, 48, 4, 2, 16
    (q, k, v), refs = qkv(rng, B, Sq, Skv, Hq, Hkv, D)
    full_lse = fai.attention(q, k, v, return_lse=True)[1]
    cuts = [0, 20, 20, 48]  # one empty part: LSE -inf, contributes nothing
    parts = [fai.attention(q, k[:, a:b], v[:, a:b], return_lse=True, out_dtype=part_dtype)
             if b > a else (np.zeros((B, Sq, Hq, D), part_dtype if part_dtype != "bfloat16"
                                     else BF16), np.full((B, Hq, Sq), -np.inf, np.float32))
             for a, b in zip(cuts[:-1], cuts[1:])]
    o, lse = fai.merge_states([p[0] for p in parts], [p[1] for p in parts], out_dtype="float32")
    # each part's O is rounded once to part_dtype, by at most half an ulp of |O_part| <= the
    # part's sum p|v|; weighted by the merge, at most OUT_STEP x sum p|v| over the union, which
    # the Ref's o_scale bounds
    ref, tol = attention_ref(*refs), tolerance(q.dtype.name, k.dtype.name, v.dtype.name)
    assert_close(o, ref, tol + OUT_STEP[part_dtype])
    assert_close(lse, ref, tol, what="LSE")
    assert_close(lse, values(full_lse), 1e-5, what="LSE")
    o2, _ = fai.merge_states([p[0] for p in parts], [p[1] for p in parts])
    assert o2.dtype == parts[0][0].dtype


def test_merge_states_packed_and_all_empty():
    rng = np.random.default_rng(25)
    o1 = rng.standard_normal((6, 2, 8)).astype(np.float32)
    o2 = rng.standard_normal((6, 2, 8)).astype(np.float32)
    l1 = rng.standard_normal((2, 6)).astype(np.float32)
    l2 = rng.standard_normal((2, 6)).astype(np.float32)
    l1[:, 0] = l2[:, 0] = -np.inf
    o, lse = fai.merge_states([o1, o2], [l1, l2])
    with np.errstate(invalid="ignore", divide="ignore"):
        w1 = np.exp(l1 - np.maximum(l1, l2))
        w2 = np.exp(l2 - np.maximum(l1, l2))
        want = (w1.T[..., None] * o1 + w2.T[..., None] * o2) / (w1 + w2).T[..., None]
    assert np.all(o[0] == 0) and np.all(np.isneginf(lse[:, 0]))
    assert_close(o[1:], want[1:], 1e-5)
    assert_close(lse[:, 1:], np.logaddexp(l1, l2)[:, 1:], 1e-5, what="LSE")


@pytest.mark.parametrize("lse,match", [
    (np.zeros((1, 2, 3), np.complex64), "lse_parts\\[0\\] has dtype complex64; expected float32"),
    (np.zeros((1, 2, 3), bool), "lse_parts\\[0\\] has dtype bool; expected float32"),
    (np.zeros((1, 2, 3), np.int32), "lse_parts\\[0\\] has dtype int32; expected float32"),
    (np.full((1, 2, 3), "0"), "lse_parts\\[0\\] has dtype str"),
    (np.full((1, 2, 3), 1e39), "lse_parts\\[0\\]\\[0, 0, 0\\] = 1e\\+39 is outside float32's"),
])
def test_merge_states_takes_float_lse_only(lse, match):
    o = np.zeros((1, 3, 2, 4), np.float32)
    with pytest.raises(fai.FaiError, match=match):
        fai.merge_states([o], [lse])
    # float64 holds what float32 does: read as float32
    merged, _ = fai.merge_states([o], [np.zeros((1, 2, 3))])
    assert np.array_equal(merged, o)


def test_merge_states_refuses_parts_that_are_not_a_sequence():
    with pytest.raises(fai.FaiError, match="o_parts: got int, expected a list"):
        fai.merge_states(5, [])
