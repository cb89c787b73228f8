#!/usr/bin/env python3
"""The PyTorch side of bench/fusion_bench, on the CPU, eager mode, timed as fusion_bench times weft
(median of REPS after a warm-up):
  - the 8-op chain sigmoid(relu(x * a + b) * c - d) * e + f on N floats: inference, and a step
    (the forward and the backward, dx for a given dy, of x with requires_grad);
  - with --block RxC,...: a transformer block's pointwise groups on (R, C) float32, inference:
    gelu(x + b) with approximate "tanh" and "none" (b of (C,)), and r + x * m (the residual and
    Dropout's mask m applied: what a fused residual + dropout computes once the mask is drawn).

Usage: torch_fusion_peer.py THREADS REPS N [--block RxC,...]. Prints one JSON object on its last
line: {"available": bool, "version": str, "threads": int, "forward_ms": float, "step_ms": float,
"block": [{"rows": int, "cols": int, "bias_gelu_tanh_ms": float, "bias_gelu_ms": float,
"residual_dropout_ms": float}, ...]}.
"""
import json
import sys

from peer_common import hello, import_torch, median_ms


def chain(torch, x):
    return torch.sigmoid(torch.relu(x * 1.5 + 0.25) * 0.75 - 0.5) * 2.0 + -1.0


def chain_times(torch, n, reps):
    x = torch.rand(n) * 4 - 2
    dy = torch.rand(n) * 4 - 2
    xg = x.clone().requires_grad_(True)

    def forward():
        with torch.no_grad():
            chain(torch, x)

    def step():
        (dx,) = torch.autograd.grad(chain(torch, xg), xg, dy)
        return dx

    return dict(forward_ms=median_ms(forward, reps), step_ms=median_ms(step, reps))


def block_times(torch, rows, cols, reps):
    F = torch.nn.functional
    x, r = torch.rand(rows, cols) * 4 - 2, torch.rand(rows, cols) * 4 - 2
    b = torch.rand(cols) - 0.5
    m = (torch.rand(rows, cols) >= 0.1).float() / 0.9
    with torch.no_grad():
        return dict(rows=rows, cols=cols,
                    bias_gelu_tanh_ms=median_ms(lambda: F.gelu(x + b, approximate="tanh"), reps),
                    bias_gelu_ms=median_ms(lambda: F.gelu(x + b), reps),
                    residual_dropout_ms=median_ms(lambda: r + x * m, reps))


def main():
    args, shapes = sys.argv[1:], []
    if "--block" in args:
        at = args.index("--block")
        shapes = [tuple(int(v) for v in s.split("x")) for s in args[at + 1].split(",") if s]
        args = args[:at] + args[at + 2:]
    threads = int(args[0]) if len(args) > 0 else 2
    reps = int(args[1]) if len(args) > 1 else 10
    n = int(args[2]) if len(args) > 2 else 16 << 20
    torch = import_torch(threads)
    if torch is None:
        return
    result = dict(hello(torch))
    if n > 0:
        result.update(chain_times(torch, n, reps))
    result["block"] = [block_times(torch, r, c, reps) for r, c in shapes]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
