"""python -m fai.bench without its peers: `import fai` loads no bench code, and the lines that say
what is missing name exactly the modules to install. Nothing here times anything."""
import importlib.util
import subprocess
import sys

import pytest

from fai.bench import _peers, _report

PEER_MODULES = ("torch", "onnxruntime", "onnx", "openvino", "matplotlib", "transformers")


def _installed_only(monkeypatch, absent):
    """find_spec as if the modules in `absent` were not installed and every other one were."""
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in absent else object())


@pytest.mark.parametrize("absent, line", [
    ((), None),
    (("onnx",), "ONNX Runtime: left out, onnx not installed"),
    (("onnxruntime",), "ONNX Runtime: left out, onnxruntime not installed"),
    (("onnxruntime", "onnx"), "ONNX Runtime: left out, onnxruntime and onnx not installed"),
])
def test_left_out_names_the_missing_modules(monkeypatch, absent, line):
    _installed_only(monkeypatch, absent)
    assert _peers.left_out("ort") == line


def test_left_out_torch_and_openvino(monkeypatch):
    _installed_only(monkeypatch, ("torch", "openvino"))
    assert _peers.left_out("torch") == "torch SDPA: left out, torch not installed"
    assert _peers.left_out("openvino") == "OpenVINO: left out, openvino not installed"


def test_every_peer_has_its_modules():
    assert set(_peers.MODULES) == set(_peers.PEERS)


def test_plot_without_matplotlib_names_the_bench_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    line = _report.write_plot([], ["fai"], str(tmp_path / "plot.png"), "title")
    assert "matplotlib is not installed" in line and "[bench]" in line
    assert not (tmp_path / "plot.png").exists()


def _modules_after(code):
    code += "\nimport sys\nprint(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    return {m for m in out if m.split(".")[0] in PEER_MODULES or m.startswith("fai.bench")}


def test_import_fai_loads_no_bench_and_no_peer():
    assert _modules_after("import fai") == set()


def test_import_fai_bench_loads_no_peer():
    assert {m for m in _modules_after("import fai.bench._cli")
            if not m.startswith("fai.bench")} == set()


def test_help_runs():
    r = subprocess.run([sys.executable, "-m", "fai.bench", "--help"], capture_output=True,
                       text=True)
    assert r.returncode == 0 and "python -m fai.bench" in r.stdout, r.stderr


def _owners(array):
    """The objects an array's memory comes from, along its chain of bases."""
    while array is not None:
        yield array
        array = getattr(array, "base", None)


@pytest.mark.parametrize("numpy_kv", [False, True])
def test_paged_kv_memory(monkeypatch, numpy_kv):
    """fai's paged K/V sit in fai.empty_cache's memory (2 MiB aligned), or with --numpy-kv in
    numpy's; the values are the same either way."""
    import numpy as np
    from fai import _cache
    from fai.bench import _cases
    monkeypatch.setitem(_cases.SHAPES, "T", (2, 4, 2, 1, 256, 64, False, 64, "tiny paged"))
    case = _cases.Case("T", False, numpy_kv=numpy_kv)
    plain = _cases.Case("T", False, numpy_kv=True)
    for got, want in ((case.k, plain.k), (case.v, plain.v)):
        from_cache = any(isinstance(o, _cache._CacheMemory) for o in _owners(got))
        assert from_cache == (not numpy_kv)
        assert not from_cache or got.ctypes.data % (2 << 20) == 0
        np.testing.assert_array_equal(got, want)
    assert case.kv_memory == ("numpy arrays" if numpy_kv else "fai.empty_cache")


def test_cold_evicts_before_every_call():
    """With an evictor (--cold), every warm-up and timed call of every library comes right after
    an eviction, and nothing else does."""
    from fai.bench import _measure
    events = []

    def setup(label):
        def make(case, threads, bf16):
            def call():
                events.append(label)
                return label
            return call, lambda out: [0.0], label
        return make

    results, errors = _measure.measure([("a", setup("a")), ("b", setup("b"))], None, 1, False,
                                       runs=3, warmup=2, evict=lambda: events.append("evict"))
    assert not errors and set(results) == {"a", "b"}
    assert len(events) == 2 * (2 * 2 + 2 * 3)
    assert events[0::2] == ["evict"] * 10 and "evict" not in events[1::2], events
    events.clear()
    _measure.measure([("a", setup("a"))], None, 1, False, runs=2, warmup=1)
    assert events == ["a"] * 3


def test_evictor_reads_every_line_of_a_buffer_past_the_caches(monkeypatch):
    import fai
    from fai.bench import _evict
    monkeypatch.setattr(_evict, "_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(fai, "cpu_cache_bytes", lambda level: {2: 1 << 19, 3: 3 << 20}[level])
    evict = _evict.Evictor()
    assert evict.bytes == 6 << 20  # twice the L3, above the minimum
    assert evict() == (6 << 20) // 64  # a byte of 1 from each 64-byte line
    monkeypatch.setattr(fai, "cpu_cache_bytes", lambda level: 0)
    assert _evict.Evictor().bytes == 1 << 20


def _setup(label, fail_call_at=None, fail_finish=False):
    """A peer's setup whose call raises on its call number `fail_call_at` (0: the first)."""
    def make(case, threads, bf16):
        calls = []

        def call():
            calls.append(1)
            if fail_call_at is not None and len(calls) > fail_call_at:
                raise RuntimeError(f"{label} cannot run this\nsecond line")
            return label

        def finish(out):
            if fail_finish:
                raise ValueError(f"{label} gave no output")
            return [0.0]
        return call, finish, label
    return make


@pytest.mark.parametrize("warmup", [0, 2])
def test_peer_failing_in_a_timed_call_is_reported(warmup):
    """With --warmup 0 the first call is a timed one: a peer that raises there (or later, or
    when its output is read) is reported with its error, and the others still run."""
    from fai.bench import _measure
    setups = [("fai", _setup("fai")), ("bad", _setup("bad", fail_call_at=warmup)),
              ("late", _setup("late", fail_call_at=warmup + 1)),
              ("unread", _setup("unread", fail_finish=True))]
    results, errors = _measure.measure(setups, None, 1, False, runs=3, warmup=warmup)
    assert set(results) == {"fai"}
    assert errors == {"bad": "RuntimeError: bad cannot run this",
                      "late": "RuntimeError: late cannot run this",
                      "unread": "ValueError: unread gave no output"}


def _parse_error(capsys, argv):
    from fai.bench import _cli
    with pytest.raises(SystemExit) as exc:
        _cli._parse(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["P1", "P1"], "shape P1 given more than once"),
    (["D1", "P2", "D1", "P2"], "shape D1 P2 given more than once"),
    (["--peers", "torch,torch"], "--peers 'torch,torch' names torch more than once"),
    (["--peers", "torch, ,ort"], "--peers 'torch, ,ort' has an empty entry"),
    (["--peers", ""], "--peers '' has an empty entry"),
    (["--peers", "torch,"], "has an empty entry"),
    (["--no-plot", "--plot", "x.png"], "--no-plot and --plot x.png: give one of them"),
    (["--threads", "0"], "--threads and --runs must be >= 1"),
])
def test_cli_refuses_repeated_empty_and_conflicting_options(capsys, monkeypatch, tmp_path, argv,
                                                            message):
    monkeypatch.chdir(tmp_path)
    assert message in _parse_error(capsys, argv)


def test_cli_refuses_more_threads_than_fai_runs(capsys, monkeypatch, tmp_path):
    import fai
    monkeypatch.chdir(tmp_path)
    err = _parse_error(capsys, ["--threads", str(fai.cpu_count() + 1)])
    assert f"--threads {fai.cpu_count() + 1}: fai runs on at most fai.cpu_count() = " \
           f"{fai.cpu_count()} threads" in err


def test_cli_refuses_unwritable_output_paths_up_front(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    missing = str(tmp_path / "no" / "such" / "out.json")
    assert f"--json '{missing}': the directory" in _parse_error(capsys, ["--json", missing])
    (tmp_path / "sub").mkdir()
    assert "--plot 'sub' is a directory" in _parse_error(capsys, ["--plot", "sub"])
    assert "--json '' is a directory" in _parse_error(capsys, ["--json", ""])
    # the default plot lands in the working directory, which must be writable too
    (tmp_path / "fai_bench.png").mkdir()
    assert "--plot 'fai_bench.png' is a directory" in _parse_error(capsys, [])
    from fai.bench import _cli
    assert _cli._parse(["--no-plot"]).plot == "fai_bench.png"


def test_cli_accepts_distinct_shapes_peers_and_paths(monkeypatch, tmp_path):
    from fai.bench import _cli
    monkeypatch.chdir(tmp_path)
    args = _cli._parse(["P1", "D2", "--peers", " torch , ort", "--json", "rows.json",
                        "--plot", "p.png"])
    assert (args.shapes, args.peers, args.plot) == (["P1", "D2"], ["torch", "ort"], "p.png")
    assert _cli._parse(["--peers", "none"]).peers == []


def test_report_write_failures_are_lines_not_tracebacks(monkeypatch, tmp_path):
    line = _report.write_json([{"shape": "P1"}], str(tmp_path / "gone" / "rows.json"))
    assert line.startswith(f"json: could not write {tmp_path / 'gone' / 'rows.json'}: ")
    assert _report.write_json([{"shape": "P1"}], str(tmp_path / "rows.json")) is None

    def unwritable(rows, names, path, title):
        raise ValueError("Format 'xyz' is not supported")
    monkeypatch.setattr(_report, "_plot", unwritable)
    assert _report.write_plot([], ["fai"], "out.xyz", "t") == \
        "plot: could not write out.xyz: Format 'xyz' is not supported"


def test_round_p_bf16_note_says_what_the_plan_does(monkeypatch):
    """--round-p-bf16 applies where PV multiplies in bf16 (the matrix engine with 16-bit K/V, or
    all-bf16 on bf16 dot products): fai's note says what the plan does with P."""
    import fai
    from fai.bench import _cases, _fai
    monkeypatch.setitem(_cases.SHAPES, "T", (1, 2, 1, 64, 64, 32, True, 0, "tiny prefill"))
    case = _cases.Case("T", False)
    _, _, note = _fai.setup_fai(case, 1, False, round_p_bf16=True)
    parts = fai.Plan.like(case.q, case.k, case.v, round_p_bf16=True, **case.kw).info["p_parts"]
    assert note.endswith(_fai._P_PARTS[parts]), note
    _, _, plain = _fai.setup_fai(case, 1, False)
    assert not any(text in plain for text in _fai._P_PARTS.values())
