#!/usr/bin/env python3
"""The PyTorch side of bench/ops_bench: the same workloads, timed the same way.

Prints one JSON object: {"available": bool, "blas": str, "threads": int, "fc_ms": ..., "conv_ms": ...,
"add_inplace_us": ..., "add_alloc_us": ..., "add_inplace_us_rounds": [...], "add_alloc_us_rounds": [...]}.
Run by ops_bench in the same run as weft's figures, as: torch_peer.py THREADS REPS [TINY_ROUNDS [TINY_ONLY]]
(the tiny adds are measured TINY_ROUNDS times, their figures the median of the rounds; TINY_ONLY=1
skips the large ops, whose figures are then 0).
"""
import json
import sys
import time


def median_ms(fn, reps):
    fn()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    tiny_rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    tiny_only = len(sys.argv) > 4 and sys.argv[4] == "1"
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"available": False, "error": str(e)}))
        return
    torch.set_num_threads(threads)
    # Debian's PyTorch calls the system BLAS (libblas.so.3), whatever the alternatives point at:
    # report the library actually mapped after a matrix product.
    torch.mm(torch.ones(64, 64), torch.ones(64, 64))
    blas = "BLAS: unknown"
    with open("/proc/self/maps") as maps:
        libs = sorted({line.split()[-1] for line in maps if "blas" in line.lower() and ".so" in line})
    if libs:
        blas = "BLAS loaded: " + ", ".join(libs)
    # FullyConnected forward + backward: batch 128, 784 -> 1024.
    x = torch.randn(128, 784, requires_grad=True)
    fc = torch.nn.Linear(784, 1024)
    dy = torch.randn(128, 1024)

    def fc_step():
        y = fc(x)
        y.backward(dy)

    # Convolution forward + backward: batch 64, 32 -> 64 channels, 3x3, padding 1, 28x28.
    xc = torch.randn(64, 32, 28, 28, requires_grad=True)
    conv = torch.nn.Conv2d(32, 64, 3, padding=1)
    dyc = torch.randn(64, 64, 28, 28)

    def conv_step():
        y = conv(xc)
        y.backward(dyc)

    a = torch.ones(1)
    b = torch.ones(1)
    n = 100000

    def add_inplace():
        for _ in range(n):
            a.add_(b)

    def add_alloc():
        for _ in range(n):
            torch.add(a, b)

    inplace_rounds, alloc_rounds = [], []
    with torch.no_grad():
        for _ in range(tiny_rounds):
            inplace_rounds.append(median_ms(add_inplace, 3) * 1e3 / n)
            alloc_rounds.append(median_ms(add_alloc, 3) * 1e3 / n)
    print(json.dumps({
        "available": True,
        "version": torch.__version__,
        "blas": blas,
        "threads": torch.get_num_threads(),
        "fc_ms": 0 if tiny_only else median_ms(fc_step, reps),
        "conv_ms": 0 if tiny_only else median_ms(conv_step, max(3, reps // 2)),
        "add_inplace_us": sorted(inplace_rounds)[len(inplace_rounds) // 2],
        "add_alloc_us": sorted(alloc_rounds)[len(alloc_rounds) // 2],
        "add_inplace_us_rounds": inplace_rounds,
        "add_alloc_us_rounds": alloc_rounds,
    }))


if __name__ == "__main__":
    main()
