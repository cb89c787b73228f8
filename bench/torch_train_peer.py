#!/usr/bin/env python3
"""The PyTorch side of bench/train_bench: the same MLPs, batch, optimizer and thread count.

Usage: torch_train_peer.py THREADS STEPS [ROUNDS]. ms_per_step is the median of ROUNDS (default 1)
rounds of STEPS steps. Prints one JSON object:
{"available": bool, "blas": str, "nets": [{"name": str, "ms_per_step": float, "peak_bytes": int}, ...]}.
peak_bytes is the growth of the process's peak resident memory while the net was built and
trained (ru_maxrss after, minus the resident size before).
"""
import json
import resource
import sys
import time

NETS = [("mlp 64-256-256-10", [64, 256, 256, 10]), ("mlp 784-1024-1024-10", [784, 1024, 1024, 10])]
BATCH = 128


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def run(torch, sizes, steps, rounds):
    before = rss_bytes()
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    net = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(BATCH, sizes[0])
    y = torch.randint(0, sizes[-1], (BATCH,))

    def step():
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()

    for _ in range(5):
        step()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        times.append((time.perf_counter() - start) * 1e3 / steps)
    ms = sorted(times)[len(times) // 2]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    return ms, max(peak, 0)


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"available": False, "error": str(e)}))
        return
    torch.set_num_threads(threads)
    torch.mm(torch.ones(8, 8), torch.ones(8, 8))
    with open("/proc/self/maps") as maps:
        libs = sorted({line.split()[-1] for line in maps if "blas" in line.lower() and ".so" in line})
    nets = []
    for name, sizes in NETS:
        ms, peak = run(torch, sizes, steps, rounds)
        nets.append({"name": name, "ms_per_step": ms, "peak_bytes": peak})
    print(json.dumps({"available": True, "version": torch.__version__, "threads": torch.get_num_threads(),
                      "blas": ", ".join(libs) or "unknown", "nets": nets}))


if __name__ == "__main__":
    main()
