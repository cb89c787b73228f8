"""What every PyTorch peer script of bench/ shares: importing torch (or saying, as the one JSON
line a benchmark reads, why it cannot), the greeting fields, which BLAS is mapped, and the timing.
Each peer script lives beside this file (under Bazel and in the GPU bundle), so Python finds it.

  torch = import_torch(threads=2)          # None (after printing {"available": false, ...})
  result = dict(hello(torch), ms=median_ms(step, reps))
"""
import json
import re
import resource
import time


def unavailable(error):
    """Prints the one JSON object a benchmark reads when its peer cannot run."""
    print(json.dumps({"available": False, "error": error}), flush=True)


def import_torch(threads=None, need_cuda=False, modules=()):
    """torch (with `threads` intra-op threads, and the extra `modules` such as "torch.distributed"
    imported), or None after printing why not: torch missing, or no CUDA device when it is needed."""
    try:
        import importlib
        import torch
        for name in modules:
            importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 (a broken install can raise more than ImportError)
        unavailable(f"cannot import torch: {e}")
        return None
    if need_cuda and not torch.cuda.is_available():
        unavailable("no CUDA device")
        return None
    if threads is not None:
        torch.set_num_threads(threads)
    return torch


def hello(torch):
    """The fields every peer's answer starts with."""
    return {"available": True, "version": torch.__version__, "threads": torch.get_num_threads()}


def blas_libraries(torch):
    """The BLAS libraries mapped after a matrix product (Debian's PyTorch calls the system BLAS,
    libblas.so.3, whatever the alternatives point at), as a string."""
    torch.mm(torch.ones(64, 64), torch.ones(64, 64))
    with open("/proc/self/maps") as maps:
        libs = sorted({line.split()[-1] for line in maps if "blas" in line.lower() and ".so" in line})
    return ", ".join(libs) or "unknown"


def median_ms(fn, reps):
    """The median of `reps` timed calls of fn, in milliseconds, after one call to warm up."""
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return times[len(times) // 2]


def rounds_ms(step, steps, rounds, warmup=5):
    """The median of `rounds` rounds of `steps` calls of step, in milliseconds per call, after
    `warmup` calls."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        times.append((time.perf_counter() - start) * 1e3 / steps)
    return sorted(times)[len(times) // 2]


def rss_bytes():
    """The process's resident memory now, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def start_peak():
    """Restarts the peak that peak_growth reads at the resident memory now, which it returns: a
    row's peak is then its own, not the largest of the rows before it in this process (Linux's
    VmHWM, reset by writing 5 to /proc/self/clear_refs; ru_maxrss, which only grows, where that
    fails)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return rss_bytes()


def peak_growth(before):
    """How far the process's peak resident memory rose above `before` (start_peak()), in bytes."""
    try:
        with open("/proc/self/status") as f:
            peak = int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) * 1024
    except (OSError, AttributeError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return max(peak - before, 0)
