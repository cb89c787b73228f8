#!/usr/bin/env python3
"""Writes tests/layer_norm_torch_cases.h: PyTorch's layer normalization (torch.native_layer_norm,
what nn.LayerNorm runs) on small inputs, in float64, as the oracle of ops_norm_test's LayerNorm
tests. Each case has an input x, an output gradient gy, a random weight and bias, and PyTorch's
output, mean and rstd (the hidden outputs), and the gradients of L = sum(y * gy) for the input,
weight and bias. x and gy are bfloat16-exact, so that weft's bfloat16 runs start from the same
numbers as its float32 and float64 ones.

PyTorch normalizes the trailing dimensions; a case whose weft axis is not the last moves that
axis to the end and back (mean and rstd then have the axis' extent 1, as weft's hidden outputs).

    /usr/bin/python3 tests/layer_norm_torch_cases.py > tests/layer_norm_torch_cases.h &&
        clang-format -i tests/layer_norm_torch_cases.h   # Debian's PyTorch 1.13
"""
import torch

from torch_fixture import f32, values, open_header, close_cases

CASES = [
    # name, input shape, weft's axis, eps
    ("rows_of_8", (4, 8), -1, 1e-5),
    ("batch_time_channels", (2, 3, 16), -1, 1e-5),
    ("wide_rows", (3, 100), -1, 1e-5),
    ("large_eps", (3, 7), -1, 0.1),
    ("axis_1_of_3", (2, 5, 3), 1, 1e-5),
    ("axis_0", (6, 4), 0, 1e-3),
    ("one_axis", (9,), 0, 1e-5),
]
FIELDS = ["x", "gy", "weight", "bias", "y", "mean", "rstd", "dx", "dweight", "dbias"]


def bf16_exact(shape, gen, scale=1.0):
    """Float32 values that bfloat16 holds exactly, in float64."""
    return f32(shape, gen, scale).bfloat16().double()


def run(shape, axis, eps, gen):
    c = shape[axis]
    x = bf16_exact(shape, gen, 2.0).requires_grad_()
    weight = (1.0 + f32((c,), gen, 0.5)).float().double().requires_grad_()
    bias = f32((c,), gen).requires_grad_()
    gy = bf16_exact(shape, gen)
    moved = x.movedim(axis, -1)
    y, mean, rstd = torch.native_layer_norm(moved, (c,), weight, bias, eps)
    y, mean, rstd = (t.movedim(-1, axis) for t in (y, mean, rstd))
    (y * gy).sum().backward()
    got = {"x": x, "gy": gy, "weight": weight, "bias": bias, "y": y, "mean": mean, "rstd": rstd,
           "dx": x.grad, "dweight": weight.grad, "dbias": bias.grad}
    return {k: t.detach() for k, t in got.items()}


def braced(t):
    return "{" + values(t) + "}"


def main():
    gen = torch.Generator().manual_seed(20261202)
    open_header("layer_norm_torch_cases.py", [
        "Each case: its input shape, weft's axis and eps, and row-major values of the input,",
        "output gradient, weight, bias, output, mean, rstd and the three gradients.",
    ], "layer_norm_torch")
    print("struct Case {\n  const char* name;\n  std::vector<int64_t> shape;\n  int axis;")
    print("  double eps;\n  std::vector<double> " + ", ".join(FIELDS) + ";\n};\n")
    print("inline const std::vector<Case>& Cases() {")
    print("  static const auto* cases = new std::vector<Case>{")
    for name, shape, axis, eps in CASES:
        got = run(shape, axis, eps, gen)
        print('      {"%s", {%s}, %d, %r,' % (name, ", ".join(str(s) for s in shape), axis, eps))
        print("       " + ",\n       ".join(braced(got[k]) for k in FIELDS) + "},")
    close_cases("layer_norm_torch")


if __name__ == "__main__":
    main()
