"""Timing: every library set up and warmed, then called in turns."""
import statistics
import time

import numpy as np


def measure(setups, case, threads, bf16, runs, warmup, evict=None):
    """Sets every library up, warms each one, then times them in turns (run r calls every
    library once, starting from a different one each time), so that the load of a shared machine
    weighs on all of them alike; with `evict`, it is called before every call, untimed (--cold).
    Returns {label: (median_ms, min_ms, O float32, note)} and {label: error} for the libraries
    that could not run."""
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
            errors[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    labels = list(ready)
    times = {label: [] for label in labels}
    last = {}
    for r in range(runs):
        for n in range(len(labels)):
            label = labels[(r + n) % len(labels)]
            if evict:
                evict()
            t0 = time.perf_counter()
            last[label] = ready[label][0]()
            times[label].append((time.perf_counter() - t0) * 1e3)
    results = {label: (statistics.median(times[label]), min(times[label]),
                       np.asarray(ready[label][1](last[label]), np.float32), ready[label][2])
               for label in labels}
    return results, errors
