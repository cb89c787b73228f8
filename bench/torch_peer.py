#!/usr/bin/env python3
"""The PyTorch side of bench/ops_bench: the same workloads, timed the same way.

  torch_peer.py THREADS REPS [TINY_ONLY]
prints one JSON object: {"available": bool, "version": str, "blas": str, "threads": int, "fc_ms": ...,
"conv_ms": ..., "fc_gelu_ms": ..., "add_inplace_us": ..., "add_alloc_us": ...} (TINY_ONLY=1 skips the large ops, whose
figures are then 0).

  torch_peer.py THREADS --serve
prints {"available": ..., "version": ..., "threads": ...} and then answers each line "inplace" or
"alloc" on its stdin with one round of those tiny adds, {"add_inplace_us": ...} or
{"add_alloc_us": ...}, one JSON object per line, until its stdin closes: ops_bench alternates its own rounds with these
(bench/peer.h, PeerSession).
"""
import json
import sys
import time

from peer_common import blas_libraries, hello, import_torch, median_ms


def tiny_round(torch, kinds=("inplace", "alloc")):
    """One round of the tiny adds of `kinds`: 100,000 on a 1-element array, in place and
    allocating, each the median of 3 timings, in microseconds per add."""
    a = torch.ones(1)
    b = torch.ones(1)
    n = 100000

    def add_inplace():
        for _ in range(n):
            a.add_(b)

    def add_alloc():
        for _ in range(n):
            torch.add(a, b)

    fns = {"inplace": add_inplace, "alloc": add_alloc}
    with torch.no_grad():
        return {f"add_{kind}_us": median_ms(fns[kind], 3) * 1e3 / n for kind in kinds}


def large_ops(torch, reps):
    # FullyConnected forward + backward: batch 128, 784 -> 1024.
    x = torch.randn(128, 784, requires_grad=True)
    fc = torch.nn.Linear(784, 1024)
    dy = torch.randn(128, 1024)

    def fc_step():
        fc(x).backward(dy)

    # Convolution forward + backward: batch 64, 32 -> 64 channels, 3x3, padding 1, 28x28.
    xc = torch.randn(64, 32, 28, 28, requires_grad=True)
    conv = torch.nn.Conv2d(32, 64, 3, padding=1)
    dyc = torch.randn(64, 64, 28, 28)

    def conv_step():
        conv(xc).backward(dyc)

    # FullyConnected + gelu_tanh, inference: 512 rows, 768 -> 3072 (a GPT-2 MLP's first layer).
    xg = torch.randn(512, 768)
    fcg = torch.nn.Linear(768, 3072)

    def fc_gelu():
        with torch.no_grad():
            torch.nn.functional.gelu(fcg(xg), approximate="tanh")

    return {"fc_ms": median_ms(fc_step, reps), "conv_ms": median_ms(conv_step, max(3, reps // 2)),
            "fc_gelu_ms": median_ms(fc_gelu, reps)}


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    serve = len(sys.argv) > 2 and sys.argv[2] == "--serve"
    reps = 10 if serve or len(sys.argv) <= 2 else int(sys.argv[2])
    tiny_only = len(sys.argv) > 3 and sys.argv[3] == "1"
    torch = import_torch(threads)
    if torch is None:
        return
    if serve:
        print(json.dumps(hello(torch)), flush=True)
        for line in sys.stdin:
            kind = line.strip()
            answer = tiny_round(torch, (kind,)) if kind in ("inplace", "alloc") else {"error": "unknown: " + kind}
            print(json.dumps(answer), flush=True)
        return
    result = dict(hello(torch), blas="BLAS loaded: " + blas_libraries(torch))
    result.update(tiny_round(torch))  # first: after the large ops OpenMP's idle threads spin a while
    result.update({"fc_ms": 0, "conv_ms": 0, "fc_gelu_ms": 0} if tiny_only else large_ops(torch, reps))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
