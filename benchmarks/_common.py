"""Shared helpers of the benchmark scripts: alternating timing, peak memory."""
from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_reps(fns: dict, reps: int, device: str, warmup: int = 1) -> dict:
    """Seconds of every call of every function, one list per function: the
    functions called in turn, the order reversed every repetition
    (a b c, c b a, a b c, ...) so that load from other jobs, and drift such as
    a warming cache, hit all alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
            sync(device)
    times = {name: [] for name in fns}
    order = list(fns)
    for rep in range(reps):
        for name in order if rep % 2 == 0 else order[::-1]:
            sync(device)
            t0 = time.perf_counter()
            fns[name]()
            sync(device)
            times[name].append(time.perf_counter() - t0)
    return times


def medians(times: dict) -> dict:
    """The median of each function's list of times (from :func:`time_reps`)."""
    return {name: statistics.median(ts) for name, ts in times.items()}


def time_alternating(fns: dict, reps: int, device: str, warmup: int = 1) -> dict:
    """Median seconds per call of every function (:func:`time_reps`)."""
    return medians(time_reps(fns, reps, device, warmup))


def rep_ratios(times: dict, name: str, base: str) -> list:
    """``name``'s time divided by ``base``'s in each repetition, sorted."""
    return sorted(t / b for t, b in zip(times[name], times[base]))


def paired_ratios(times: dict, base: str) -> dict:
    """Per function, the median of :func:`rep_ratios` (the two calls of a
    repetition ran next to each other): steadier than the ratio of two
    medians when the load drifts."""
    return {name: statistics.median(rep_ratios(times, name, base)) for name in times}


def current_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def vm_hwm() -> int:
    """The process's resident high-water mark (``VmHWM``) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return peak_rss()


def reset_hwm() -> bool:
    """Reset the resident high-water mark to the current RSS (Linux
    ``/proc/self/clear_refs``, value 5); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure_peak(fn, device: str) -> int:
    """Bytes above the resident baseline at the peak of one call of ``fn``.

    On CUDA: ``torch.cuda.max_memory_allocated``. On CPU the resident
    high-water mark, reset to the current RSS just before the call (so the
    start-up peak of the process does not count); call it in a fresh process
    (:func:`in_subprocess`) so that freed, cached memory of earlier work does
    not hide the call's own allocations."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    base = current_rss()
    if not reset_hwm():
        raise RuntimeError("cannot reset the peak-RSS mark (/proc/self/clear_refs); use --no-memory")
    fn()
    return vm_hwm() - base


def warm_peak(fn, device: str) -> int:
    """:func:`measure_peak` of ``fn`` after one warm-up call (lazy state such
    as Adam's moments and thread pools is not the steady-state peak)."""
    fn()
    return measure_peak(fn, device)


def in_subprocess(module: str, args: list[str]) -> dict:
    """Run ``python -m module args`` and parse the JSON its last line prints."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, env=env, cwd=root
    )
    if res.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(args)} failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def machine_line(device: str) -> str:
    line = f"torch {torch.__version__}, nproc {os.cpu_count()}, torch threads {torch.get_num_threads()}"
    if device.startswith("cuda"):
        line += f", GPU {torch.cuda.get_device_name()}"
    return line


def fmt_mb(b: float) -> str:
    return f"{b / 2**20:.0f}"
