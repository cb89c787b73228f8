#!/usr/bin/env python3
"""Writes tests/batch_norm_torch_cases.h: PyTorch's nn.BatchNorm1d and nn.BatchNorm2d on small
inputs, in float64 from float32 values, as the oracle of ops_norm_test's PyTorch test. Each case
starts from random weight, bias and running statistics, takes three training steps (each a new
input x and output gradient gy: the output, the gradients of L = sum(y * gy) for the input, weight
and bias, and the running statistics after the step), then one step in eval mode.

PyTorch's momentum m is weft's 1 - m (ops/nn/batch_norm.cc): the header keeps PyTorch's.

    /usr/bin/python3 tests/batch_norm_torch_cases.py > tests/batch_norm_torch_cases.h &&
        clang-format -i tests/batch_norm_torch_cases.h   # Debian's PyTorch 1.13
"""
import torch

from torch_fixture import f32, values, open_header, close_cases

CASES = [
    # name, module, input shape, PyTorch's momentum, eps
    ("batch_norm_2d", torch.nn.BatchNorm2d, (4, 3, 2, 3), 0.1, 1e-5),
    ("batch_norm_1d_nc", torch.nn.BatchNorm1d, (6, 4), 0.1, 1e-5),
    ("batch_norm_1d_ncl", torch.nn.BatchNorm1d, (2, 3, 5), 0.3, 1e-3),
]
TRAIN_STEPS = 3
FIELDS = ["x", "gy", "y", "dx", "dweight", "dbias", "running_mean", "running_var"]


def around(centre, shape, gen, half):
    """Float32 values in [centre - half, centre + half), held in float64."""
    return (centre + f32(shape, gen, half)).float().double()


def step(m, shape, gen):
    x = f32(shape, gen, 2.0).requires_grad_()
    y = m(x)
    gy = f32(shape, gen)
    m.zero_grad()
    (y * gy).sum().backward()
    got = {"x": x, "gy": gy, "y": y, "dx": x.grad, "dweight": m.weight.grad,
           "dbias": m.bias.grad, "running_mean": m.running_mean, "running_var": m.running_var}
    return {k: t.detach().clone() for k, t in got.items()}  # the module's tensors change later


def run(module, shape, momentum, eps, gen):
    c = shape[1]
    m = module(c, eps=eps, momentum=momentum).double()
    with torch.no_grad():
        m.weight.copy_(around(1.0, (c,), gen, 0.5))
        m.bias.copy_(f32((c,), gen))
        m.running_mean.copy_(f32((c,), gen, 0.5))
        m.running_var.copy_(around(1.0, (c,), gen, 0.5))
    start = {k: getattr(m, k).detach().clone() for k in ("weight", "bias", "running_mean", "running_var")}
    m.train()
    train = [step(m, shape, gen) for _ in range(TRAIN_STEPS)]
    m.eval()
    return start, train, step(m, shape, gen)


def braced(t):
    return "{" + values(t) + "}"


def print_step(s):
    print("          {" + ",\n           ".join(braced(s[k]) for k in FIELDS) + "},")


def main():
    gen = torch.Generator().manual_seed(20261201)
    open_header("batch_norm_torch_cases.py", [
        "Each case: its input shape, PyTorch's momentum and eps, the starting weight, bias and",
        "running statistics, three training steps and one eval step (row-major values).",
    ], "batch_norm_torch")
    print("struct Step {\n  std::vector<double> " + ", ".join(FIELDS) + ";\n};\n")
    print("struct Case {\n  const char* name;\n  std::vector<int64_t> shape;\n  double momentum, eps;")
    print("  std::vector<double> weight, bias, running_mean, running_var;")
    print("  std::vector<Step> train;\n  Step eval;\n};\n")
    print("inline const std::vector<Case>& Cases() {\n  static const auto* cases = new std::vector<Case>{")
    for name, module, shape, momentum, eps in CASES:
        start, train, eval_step = run(module, shape, momentum, eps, gen)
        print('      {"%s", {%s}, %r, %r,' % (name, ", ".join(str(s) for s in shape), momentum, eps))
        print("       " + ",\n       ".join(braced(start[k]) for k in
                                            ("weight", "bias", "running_mean", "running_var")) + ",")
        print("       {")
        for s in train:
            print_step(s)
        print("       },")
        print_step(eval_step)
        print("      },")
    close_cases("batch_norm_torch")


if __name__ == "__main__":
    main()
