"""The peers fai is timed against, and which of them this Python can run.

A peer's setup(case, threads, bf16) builds its inputs outside the timed region and returns
(call, finish, note): call() runs the attention once, finish(result) gives O as float32
[B, Sq, Hq, D], note says how the peer was called. Each setup imports its library itself, so
that a peer that is not installed costs nothing.
"""
import importlib.util

from ._openvino import setup_openvino
from ._ort import setup_ort
from ._torch import setup_torch

PEERS = {"torch": ("torch SDPA", setup_torch), "ort": ("ONNX Runtime", setup_ort),
         "openvino": ("OpenVINO", setup_openvino)}

# the modules each peer imports: ONNX Runtime's graphs are built with the onnx package
MODULES = {"torch": ["torch"], "ort": ["onnxruntime", "onnx"], "openvino": ["openvino"]}


def missing(peer):
    """The modules a peer needs that are not installed (none: the peer can run)."""
    return [m for m in MODULES[peer] if importlib.util.find_spec(m) is None]


def left_out(peer):
    """The line saying why a peer is left out, naming exactly the modules missing
    ("ONNX Runtime: left out, onnx not installed"); None when the peer can run."""
    absent = missing(peer)
    if not absent:
        return None
    return f"{PEERS[peer][0]}: left out, {' and '.join(absent)} not installed"
