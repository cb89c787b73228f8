#!/usr/bin/env python3
"""Writes tests/adamw_torch_cases.h: ten steps of torch.optim.AdamW on a weight (4, 3) that decays
and a bias (4,) that does not (two parameter groups, as GPT-2 training sets them up), from fixed
float32 gradients, with a learning rate that changes every step (a warm-up), as the oracle of
weft_optimizer_test's AdamW test. Everything in float32, as PyTorch steps it.

    /usr/bin/python3 tests/adamw_torch_cases.py > tests/adamw_torch_cases.h &&
        clang-format -i tests/adamw_torch_cases.h   # Debian's PyTorch 1.13
"""
import torch

from torch_fixture import f32, values

STEPS = 10
LR, BETAS, EPS, WD = 0.01, (0.9, 0.95), 1e-8, 0.1


def rate(t):
    """The rate of step t (1-based): a linear warm-up over the first five steps."""
    return LR * min(1.0, t / 5)


def main():
    gen = torch.Generator().manual_seed(7)
    w = f32((4, 3), gen).float().requires_grad_()
    b = f32((4,), gen).float().requires_grad_()
    init = {"w": w.detach().clone(), "b": b.detach().clone()}
    opt = torch.optim.AdamW([{"params": [w], "weight_decay": WD},
                             {"params": [b], "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    grads, after = [], []
    for t in range(1, STEPS + 1):
        for group in opt.param_groups:
            group["lr"] = rate(t)
        gw, gb = f32((4, 3), gen).float(), f32((4,), gen).float()
        w.grad, b.grad = gw.clone(), gb.clone()
        opt.step()
        grads.append((gw, gb))
        after.append((w.detach().clone(), b.detach().clone()))
    print("// Made by tests/adamw_torch_cases.py (PyTorch %s): do not edit." % torch.__version__)
    print("#pragma once\n\n#include <vector>\n\nnamespace weft::testing::adamw_torch {\n")
    print("constexpr int kSteps = %d;" % STEPS)
    print("constexpr double kLr = %r, kBeta1 = %r, kBeta2 = %r, kEpsilon = %r, kWd = %r;"
          % (LR, BETAS[0], BETAS[1], EPS, WD))
    print("inline const std::vector<float> kW0 = {%s};" % values(init["w"]))
    print("inline const std::vector<float> kB0 = {%s};" % values(init["b"]))
    for name, k, pick in (("kGradW", 0, grads), ("kGradB", 1, grads),
                          ("kWAfter", 0, after), ("kBAfter", 1, after)):
        rows = ",\n    ".join("{%s}" % values(p[k]) for p in pick)
        print("inline const std::vector<std::vector<float>> %s = {\n    %s};" % (name, rows))
    print("\n}  // namespace weft::testing::adamw_torch")


if __name__ == "__main__":
    main()
