#!/usr/bin/env python3
"""Writes tests/matmul_torch_cases.h: PyTorch's torch.matmul on small inputs, in float64 from
float32 values, as the oracle of ops_matmul_test's PyTorch test: every transpose combination
(batch_dot's transpose_a and transpose_b read as a.transpose(-1, -2) and b.transpose(-1, -2)),
operands of 2 to 4 axes, and batch axes broadcast each way. Each case: the output and the
gradients of L = sum(y * gy) for a and b (summed over the axes each was broadcast along).

    /usr/bin/python3 tests/matmul_torch_cases.py > tests/matmul_torch_cases.h &&
        clang-format -i tests/matmul_torch_cases.h   # Debian's PyTorch 1.13
"""
import torch

from torch_fixture import f32, values, open_header, close_cases

CASES = [
    # name, a's shape as stored, b's shape as stored, transpose_a, transpose_b
    ("2d", (3, 4), (4, 5), False, False),
    ("2d_ta", (4, 3), (4, 5), True, False),
    ("2d_tb", (3, 4), (5, 4), False, True),
    ("2d_ta_tb", (4, 3), (5, 4), True, True),
    ("3d", (2, 3, 4), (2, 4, 5), False, False),
    ("3d_ta_tb", (2, 4, 3), (2, 5, 4), True, True),
    ("4d_attention_scores", (2, 3, 5, 4), (2, 3, 5, 4), False, True),
    ("4d_attention_values", (2, 3, 5, 5), (2, 3, 5, 4), False, False),
    ("3d_by_2d", (2, 3, 4), (4, 5), False, False),
    ("3d_by_2d_tb", (2, 3, 4), (5, 4), False, True),
    ("2d_by_3d_ta", (4, 3), (2, 4, 5), True, False),
    ("4d_by_2d", (2, 3, 2, 4), (4, 3), False, False),
    ("4d_b1_by_3d", (2, 1, 3, 4), (3, 4, 2), False, False),
    ("4d_1h_by_4d_b1_ta", (1, 3, 4, 2), (2, 1, 4, 3), True, False),
    ("4d_by_4d_1h_tb", (2, 3, 2, 4), (2, 1, 5, 4), False, True),
]
FIELDS = ["a", "b", "gy", "y", "da", "db"]


def run(a_shape, b_shape, ta, tb, gen):
    a = f32(a_shape, gen).requires_grad_()
    b = f32(b_shape, gen).requires_grad_()
    y = torch.matmul(a.transpose(-1, -2) if ta else a, b.transpose(-1, -2) if tb else b)
    gy = f32(tuple(y.shape), gen)
    (y * gy).sum().backward()
    return {"a": a, "b": b, "gy": gy, "y": y, "da": a.grad, "db": b.grad}


def dims(shape):
    return "{" + ", ".join(str(s) for s in shape) + "}"


def main():
    gen = torch.Generator().manual_seed(20261202)
    open_header("matmul_torch_cases.py", [
        "Each case: a's and b's shapes as stored, the transposes, and the row-major values of",
        "a, b, the output gradient gy, the output y and the gradients of sum(y * gy).",
    ], "matmul_torch")
    print("struct Case {\n  const char* name;\n  std::vector<int64_t> a_shape, b_shape, y_shape;")
    print("  bool transpose_a, transpose_b;")
    print("  std::vector<double> " + ", ".join(FIELDS) + ";\n};\n")
    print("inline const std::vector<Case>& Cases() {\n  static const auto* cases = new std::vector<Case>{")
    for name, a_shape, b_shape, ta, tb in CASES:
        t = run(a_shape, b_shape, ta, tb, gen)
        print('      {"%s", %s, %s, %s, %s, %s,' % (name, dims(a_shape), dims(b_shape),
                                                    dims(t["y"].shape), str(ta).lower(),
                                                    str(tb).lower()))
        print("       " + ",\n       ".join("{" + values(t[k]) + "}" for k in FIELDS) + "},")
    close_cases("matmul_torch")


if __name__ == "__main__":
    main()
