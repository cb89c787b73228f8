#!/usr/bin/env python3
"""Writes tests/attention_torch_cases.h: PyTorch's scaled dot-product attention on small inputs,
as the oracle of ops_attention_test's PyTorch test. PyTorch 1.13 (Debian's) has no
F.scaled_dot_product_attention, so it is written out as 2.0 defines it, in float64 from float32
values: softmax(q k^T * scale + mask, with keys j > i at -inf when causal) v, scale 1/sqrt(D) by
default. Each case: the output and the gradients of L = sum(y * gy) for q, k and v (the mask gets
none). A boolean mask (True: the key takes part) is 2.0's bool attn_mask. The packed layout
"bt3hd" takes one qkv (B, T, 3, H, D) whose parts 0, 1, 2 are q, k, v (each permuted to
(B, H, T, D)) and gives y (B, T, H, D). No row has all its keys masked (PyTorch's softmax gives
NaN there; weft defines 0, which the test checks against its own reference).

    /usr/bin/python3 tests/attention_torch_cases.py > tests/attention_torch_cases.h &&
        clang-format -i tests/attention_torch_cases.h   # Debian's PyTorch 1.13
"""
import math

import torch

from torch_fixture import f32, open_header, close_cases
from torch_fixture import values as fixture_values

CASES = [
    # name, (B, H, Tq, Tk, D, Dv), causal, scale (None: default), mask: None, "full", "square"
    # (1, 1, Tq, Tk) or "padding" (B, 1, 1, Tk) with -inf at the end of batch 1's keys, or boolean:
    # "bool_padding" (B, 1, 1, Tk), False at the end of batch 1's keys, "bool_full" (B, H, Tq, Tk)
    # at random with key 0 always True; and the layout ("bhtd" unless given)
    ("plain", (1, 2, 4, 4, 3, 3), False, None, None),
    ("causal", (2, 2, 5, 5, 4, 4), True, None, None),
    ("tq_tk_d_dv", (2, 1, 3, 6, 4, 5), False, 0.7, None),
    ("causal_tq_tk", (1, 2, 6, 4, 3, 2), True, None, None),
    ("full_mask", (2, 2, 3, 5, 4, 3), False, None, "full"),
    ("square_mask_causal", (2, 2, 5, 5, 3, 4), True, None, "square"),
    ("padding_mask", (2, 2, 4, 6, 4, 4), False, None, "padding"),
    ("long_tiles_causal", (1, 1, 70, 100, 4, 3), True, None, "padding"),
    ("long_tiles_padding", (2, 1, 40, 70, 4, 3), False, None, "padding"),
    ("bool_padding", (2, 2, 4, 6, 4, 4), False, None, "bool_padding"),
    ("bool_full_causal", (2, 2, 5, 5, 3, 3), True, None, "bool_full"),
    ("packed", (2, 3, 5, 5, 4, 4), False, None, None, "bt3hd"),
    ("packed_causal_bool_padding", (2, 2, 6, 6, 3, 3), True, 0.6, "bool_padding", "bt3hd"),
    ("packed_long_causal", (1, 2, 70, 70, 4, 4), True, None, "square", "bt3hd"),
]
FIELDS = ["q", "k", "v", "mask", "gy", "y", "dq", "dk", "dv"]
BOOL_MASKS = ("bool_padding", "bool_full")


def make_mask(kind, b, h, tq, tk, gen):
    if kind is None:
        return None
    if kind == "full":
        return f32((b, h, tq, tk), gen)
    if kind == "square":
        return f32((1, 1, tq, tk), gen)
    if kind == "bool_full":
        m = torch.rand((b, h, tq, tk), generator=gen, dtype=torch.float64) < 0.6
        m[..., 0] = True
        return m
    m = torch.zeros((b, 1, 1, tk), dtype=torch.float64)
    m[1 % b, 0, 0, tk - 2:] = -math.inf
    return m == 0 if kind == "bool_padding" else m


def operands(dims, layout, gen):
    """q, k, v (B, H, T, D) each, and the leaves the gradients are taken for: q, k, v, or qkv."""
    b, h, tq, tk, d, dv = dims
    if layout == "bhtd":
        q = f32((b, h, tq, d), gen).requires_grad_()
        k = f32((b, h, tk, d), gen).requires_grad_()
        v = f32((b, h, tk, dv), gen).requires_grad_()
        return q, k, v, [q, k, v]
    qkv = f32((b, tq, 3, h, d), gen).requires_grad_()
    q, k, v = (qkv[:, :, part].permute(0, 2, 1, 3) for part in range(3))
    return q, k, v, [qkv]


def run(dims, causal, scale, mask_kind, layout, gen):
    b, h, tq, tk, d, dv = dims
    q, k, v, leaves = operands(dims, layout, gen)
    mask = make_mask(mask_kind, b, h, tq, tk, gen)
    s = q @ k.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(d))
    if mask is not None and mask.dtype == torch.bool:
        s = s.masked_fill(~mask, -math.inf)
    elif mask is not None:
        s = s + mask
    if causal:
        s = s.masked_fill(torch.ones(tq, tk, dtype=torch.bool).triu(1), -math.inf)
    y = torch.softmax(s, dim=-1) @ v
    if layout == "bt3hd":
        y = y.permute(0, 2, 1, 3)
    gy = f32(tuple(y.shape), gen)
    (y * gy).sum().backward()
    grads = [t.grad for t in leaves] + [torch.zeros(0)] * (3 - len(leaves))
    inputs = leaves + [torch.zeros(0)] * (3 - len(leaves))
    return {"q": inputs[0], "k": inputs[1], "v": inputs[2],
            "mask": mask.double() if mask is not None else torch.zeros(0),
            "gy": gy, "y": y, "dq": grads[0], "dk": grads[1], "dv": grads[2]}, mask


def values(t):
    return fixture_values(t).replace("-inf", "-kInf")  # the header defines kInf


def dims_text(shape):
    return "{" + ", ".join(str(s) for s in shape) + "}"


def main():
    gen = torch.Generator().manual_seed(20261203)
    open_header("attention_torch_cases.py", [
        "Each case: (B, H, Tq, Tk, D, Dv), causal, scale (0: 1/sqrt(D)), the mask's shape",
        "(empty: none), whether the mask is boolean (values 0 or 1: masked or taking part),",
        "whether q, k, v are packed (layout bt3hd), and the row-major values of q, k, v, mask,",
        "the output gradient gy, the output y and the gradients of sum(y * gy) for q, k and v.",
        "Packed: q holds qkv (B, T, 3, H, D) and dq its gradient (k, v, dk, dv are empty), y",
        "and gy are (B, T, H, D).",
    ], "attention_torch", ("cstdint", "limits", "vector"))
    print("inline constexpr double kInf = std::numeric_limits<double>::infinity();\n")
    print("struct Case {\n  const char* name;\n  std::vector<int64_t> dims, mask_shape;")
    print("  bool causal;\n  double scale;\n  bool bool_mask, packed;")
    print("  std::vector<double> " + ", ".join(FIELDS) + ";\n};\n")
    print("inline const std::vector<Case>& Cases() {\n"
          "  static const auto* cases = new std::vector<Case>{")
    for name, dims, causal, scale, mask_kind, *layout in CASES:
        layout = layout[0] if layout else "bhtd"
        t, mask = run(dims, causal, scale, mask_kind, layout, gen)
        mask_shape = tuple(mask.shape) if mask is not None else ()
        print('      {"%s", %s, %s, %s, %r, %s, %s,' % (
            name, dims_text(dims), dims_text(mask_shape), str(causal).lower(), scale or 0.0,
            str(mask_kind in BOOL_MASKS).lower(), str(layout == "bt3hd").lower()))
        print("       " + ",\n       ".join("{" + values(t[k]) + "}" for k in FIELDS) + "},")
    close_cases("attention_torch")


if __name__ == "__main__":
    main()
