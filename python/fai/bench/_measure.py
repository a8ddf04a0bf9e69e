"""Timing: every library set up and warmed, then called in turns."""
import statistics
import time

import numpy as np


def _reason(exc):
    """One line saying why a library could not run."""
    lines = str(exc).splitlines()
    return f"{type(exc).__name__}: {lines[0][:160] if lines else ''}"


def measure(setups, case, threads, bf16, runs, warmup, evict=None):
    """Sets every library up, warms each one, then times them in turns (run r calls every
    library once, starting from a different one each time), so that the load of a shared machine
    weighs on all of them alike; with `evict`, it is called before every call, untimed (--cold).
    Returns {label: (median_ms, min_ms, O float32, note)} and {label: error} for the libraries
    that could not run: a setup, warm-up, timed call or output that raises leaves its library
    out with the reason (with no warm-up, the first timed call is the first call)."""
    ready, errors = {}, {}
    for label, setup in setups:
        try:
            call, finish, note = setup(case, threads, bf16)
            for _ in range(warmup):
                if evict:
                    evict()
                call()
            ready[label] = (call, finish, note)
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run a shape says why
            errors[label] = _reason(exc)
    labels = list(ready)
    times = {label: [] for label in labels}
    last = {}
    for r in range(runs):
        for n in range(len(labels)):
            label = labels[(r + n) % len(labels)]
            if label in errors:
                continue
            if evict:
                evict()
            try:
                t0 = time.perf_counter()
                last[label] = ready[label][0]()
                times[label].append((time.perf_counter() - t0) * 1e3)
            except Exception as exc:  # noqa: BLE001 - as in the warm-up
                errors[label] = _reason(exc)
    results = {}
    for label in labels:
        if label in errors:
            continue
        try:
            out = np.asarray(ready[label][1](last[label]), np.float32)
        except Exception as exc:  # noqa: BLE001 - an output that cannot be read says why
            errors[label] = _reason(exc)
            continue
        results[label] = (statistics.median(times[label]), min(times[label]), out,
                          ready[label][2])
    return results, errors
