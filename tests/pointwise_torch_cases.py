#!/usr/bin/env python3
"""Writes tests/pointwise_torch_cases.h: PyTorch's outputs and gradients for erf, gelu (exact and
approximate='tanh', and weft's gelu_tanh), where (torch.where, broadcasting), take
(torch.index_select along an axis, indices of any shape) and split (torch.split, and torch.unbind
for squeeze_axis), on small inputs in float64 from float32 values, as the oracle of
ops_elementwise_test's PyTorch test. Each case: weft's op and attributes, the inputs, a head
gradient per output, the outputs and the gradients of L = sum over outputs of sum(y * gy) for the
inputs that get one (condition and indices get none: their gradient list is empty).

    /usr/bin/python3 tests/pointwise_torch_cases.py > tests/pointwise_torch_cases.h &&
        clang-format -i tests/pointwise_torch_cases.h   # Debian's PyTorch 1.13
"""
import torch
import torch.nn.functional as F

from torch_fixture import f32, values, open_header, close_cases


def unary(fn, scale):
    def run(gen):
        x = f32((3, 5), gen, scale).requires_grad_()
        return [x], [fn(x)], [True]
    return run


def where(c_shape, a_shape, b_shape):
    def run(gen):
        c = (f32(c_shape, gen) > 0).double()
        a = f32(a_shape, gen).requires_grad_()
        b = f32(b_shape, gen).requires_grad_()
        return [c, a, b], [torch.where(c != 0, a, b)], [False, True, True]
    return run


def take(a_shape, idx_shape, axis):
    def run(gen):
        a = f32(a_shape, gen).requires_grad_()
        n = a_shape[axis]
        idx = torch.randint(0, n, idx_shape, generator=gen).double()
        flat = torch.index_select(a, axis, idx.reshape(-1).long())
        shape = a_shape[:axis] + idx_shape + a_shape[axis + 1:]
        return [a, idx], [flat.reshape(shape)], [True, False]
    return run


def split(shape, n, axis, squeeze):
    def run(gen):
        x = f32(shape, gen).requires_grad_()
        parts = torch.unbind(x, axis) if squeeze else torch.split(x, shape[axis] // n, axis)
        return [x], list(parts), [True]
    return run


CASES = [
    # name, weft op, attributes, run
    ("erf", "erf", [], unary(torch.erf, 2.0)),
    ("gelu", "gelu", [], unary(F.gelu, 3.0)),
    ("gelu_none", "gelu", [("approximate", "none")], unary(F.gelu, 3.0)),
    ("gelu_tanh_attr", "gelu", [("approximate", "tanh")],
     unary(lambda x: F.gelu(x, approximate="tanh"), 3.0)),
    ("gelu_tanh_op", "gelu_tanh", [], unary(lambda x: F.gelu(x, approximate="tanh"), 3.0)),
    ("where_same", "where", [], where((3, 4), (3, 4), (3, 4))),
    ("where_broadcast", "where", [], where((1, 4, 4), (2, 1, 4), (4,))),
    ("take_axis0", "take", [("axis", "0")], take((5, 3), (2, 3), 0)),
    ("take_axis1", "take", [("axis", "1")], take((2, 4, 3), (5,), 1)),
    ("split_qkv", "split", [("num_outputs", "3"), ("axis", "-1")], split((2, 3, 6), 3, 2, False)),
    ("split_squeeze", "split", [("num_outputs", "3"), ("axis", "1"), ("squeeze_axis", "1")],
     split((2, 3, 4), 3, 1, True)),
]


def dims(shape):
    return "{" + ", ".join(str(s) for s in shape) + "}"


def tensor(t):
    return "{" + dims(tuple(t.shape)) + ", {" + values(t) + "}}"


def tensors(ts):
    return "{" + ", ".join(tensor(t) for t in ts) + "}"


def case(name, op, attrs, run, gen):
    inputs, outputs, grads = run(gen)
    heads = [f32(tuple(y.shape), gen) for y in outputs]
    sum((y * g).sum() for y, g in zip(outputs, heads)).backward()
    input_grads = [x.grad if wants else torch.zeros(0) for x, wants in zip(inputs, grads)]
    pairs = "{" + ", ".join('{"%s", "%s"}' % kv for kv in attrs) + "}"
    return "{\"%s\", \"%s\", %s,\n %s,\n %s,\n %s,\n %s}," % (
        name, op, pairs, tensors(inputs), tensors(heads), tensors(outputs), tensors(input_grads))


def main():
    gen = torch.Generator().manual_seed(20261205)
    open_header("pointwise_torch_cases.py", [
        "Each case: weft's op and attributes, its inputs, a head gradient per output, the",
        "outputs, and the gradients of sum(y * gy) per input (empty: none).",
    ], "pointwise_torch", ("cstdint", "utility", "vector"))
    print("struct Tensor {\n  std::vector<int64_t> shape;\n  std::vector<double> values;\n};\n")
    print("struct Case {\n  const char* name;\n  const char* op;")
    print("  std::vector<std::pair<const char*, const char*>> attrs;")
    print("  std::vector<Tensor> inputs, head_grads, outputs, input_grads;\n};\n")
    print("inline const std::vector<Case>& Cases() {")
    print("  static const auto* cases = new std::vector<Case>{")
    for name, op, attrs, run in CASES:
        print(case(name, op, attrs, run, gen))
    close_cases("pointwise_torch")


if __name__ == "__main__":
    main()
