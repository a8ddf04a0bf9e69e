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
