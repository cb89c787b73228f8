#!/usr/bin/env python3
"""The PyTorch side of bench/fusion_bench: the 8-op chain sigmoid(relu(x * a + b) * c - d) * e + f
on the CPU, eager mode, timed as fusion_bench times weft (median of REPS after a warm-up).

Usage: torch_fusion_peer.py THREADS REPS N. Prints one JSON object on its last line:
{"available": bool, "version": str, "threads": int, "forward_ms": float, "step_ms": float}; step_ms
is the forward and the backward (dx for a given dy) of x with requires_grad.
"""
import json
import sys

from peer_common import hello, import_torch, median_ms


def chain(torch, x):
    return torch.sigmoid(torch.relu(x * 1.5 + 0.25) * 0.75 - 0.5) * 2.0 + -1.0


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 16 << 20
    torch = import_torch(threads)
    if torch is None:
        return
    x = torch.rand(n) * 4 - 2
    dy = torch.rand(n) * 4 - 2
    xg = x.clone().requires_grad_(True)

    def forward():
        with torch.no_grad():
            chain(torch, x)

    def step():
        (dx,) = torch.autograd.grad(chain(torch, xg), xg, dy)
        return dx

    print(json.dumps(dict(hello(torch), forward_ms=median_ms(forward, reps), step_ms=median_ms(step, reps))))


if __name__ == "__main__":
    main()
