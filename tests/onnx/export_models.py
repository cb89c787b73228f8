#!/usr/bin/env python3
"""Writes the ONNX models tests/onnx_import_test.cc imports, with PyTorch's outputs beside them.

Run from the repository root with Debian's PyTorch 1.13 and onnx 1.12 (python3-torch,
python3-onnx): `python3 tests/onnx/export_models.py`. Small widths, random weights (seeded), so
the files stay small enough to commit:

  mlp.onnx       Linear-ReLU x2 and a Linear (the shape of examples/train_mlp), opset 13, a
                 symbolic batch axis "batch"
  mlp_ext.onnx   the same, its initializers in mlp_ext.data beside it (external data)
  cnn.onnx       two conv 3x3 / ReLU / max-pool 2 stages, Flatten, two Linears (examples/train_cnn),
                 opset 17
  bn_cnn.onnx    conv, ReLU, BatchNorm (eval: running statistics), average pool without the
                 padding counted, global average pool, Linear, Softmax, opset 13
  *.json         {"input": [...], "input_shape": [...], "output": [...], "output_shape": [...]}
  tensor_ops.onnx Transpose, Unsqueeze, ReduceMean, Concat, Pow, LayerNormalization, Gather,
                 Where, Split, Cast (opset 17): its .json holds only the input (ONNX Runtime is
                 the reference)
  unsupported_op.onnx, asymmetric_pads.onnx, divide_by_zero.onnx, opset9.onnx,
                 symbolic_sum.onnx, expand_negative.onnx: models weft must refuse, by name
  ../../fuzz/corpus/onnx/cnn_fixed.onnx: the CNN with every extent given, a seed of the fuzzer

  mlp_opset17.onnx, cnn_opset13.onnx, bn_cnn_opset17.onnx: the same models at the other opset
  encoder.onnx, encoder_opset17.onnx: nn.TransformerEncoder (2 layers, width 32, 4 heads) with a
                 key padding mask, symbolic batch and sequence extents (opsets 13 and 17);
                 encoder.json: {"inputs": {"x": {"values", "shape", "dtype"}, "mask": ...},
                 "output", "output_shape"} at batch 2 x 7 positions, encoder_1.json at 3 x 5
  shape_ops.onnx Slice (of values and of Shape), Mod, Squeeze, Expand, ConstantOfShape, Equal
                 and Where on a symbolic batch (hand-made, opset 13; ONNX Runtime the
                 reference), at batch 2 and 5 (shape_ops_1.json)
  conv_bn.onnx   Conv-BatchNorm-ReLU x2 with the BatchNormalization nodes kept (weft folds them)
  attention_sdpa.onnx, attention_scaled_after_mask.onnx, attention_mask_broadcasts.onnx:
                 attention written out by hand, one the import folds into Attention and two it
                 must not (opset 17; their .json hold only the inputs, ONNX Runtime the reference)
  gpt.onnx       tests/gpt_torch_cases.py's GPT (its logits), int64 tokens with a symbolic batch
                 axis (opset 17: Trilu, Range, LayerNormalization); gpt_1.json at batch 3;
                 gpt_opset14.onnx the same at opset 14 (1.13 exports triu at 14 and later)

`python3 tests/onnx/export_models.py --torchvision DIR` writes the full-size models instead, into
DIR (onnx_import_test runs it; too large to commit): torchvision's resnet18 and mobilenet_v2 at
opsets 13 and 17 (resnet18_opset13.onnx, ...), random weights (seeded), a batch of 2 images of
224x224.
"""
import json
import os
import sys

import onnx
from onnx import helper, TensorProto
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))


def export(model, x, name, opset, external=False, folder=HERE, dynamic=True, keep_bn=False):
    """keep_bn: export BatchNormalization nodes as they are (the exporter folds each into the
    convolution before it otherwise), for weft's own folding to do."""
    model.eval()
    path = os.path.join(folder, name + ".onnx")
    axes = {"data": {0: "batch"}, "out": {0: "batch"}} if dynamic else None
    mode = torch.onnx.TrainingMode.PRESERVE if keep_bn else torch.onnx.TrainingMode.EVAL
    torch.onnx.export(model, x, path, opset_version=opset, input_names=["data"],
                      output_names=["out"], dynamic_axes=axes, training=mode)
    if external:
        m = onnx.load(path)
        onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=name + ".data", size_threshold=0)
    with torch.no_grad():
        y = model(x)
    with open(os.path.join(folder, name + ".json"), "w") as f:
        json.dump({"input": [round(v, 8) for v in x.flatten().tolist()], "input_shape": list(x.shape),
                   "output": y.flatten().tolist(), "output_shape": list(y.shape)}, f)


class Encoder(nn.Module):
    """nn.TransformerEncoder, 2 post-norm layers (batch first) with a key padding mask."""

    def __init__(self, width=32, heads=4):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=width, nhead=heads, dim_feedforward=2 * width,
                                           dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)

    def forward(self, x, mask):
        return self.encoder(x, src_key_padding_mask=mask)


def encoder_inputs(batch, seq, width):
    """Random tokens and a padding mask: each sequence but the first ends in padding."""
    x = torch.randn(batch, seq, width)
    mask = torch.zeros(batch, seq, dtype=torch.bool)
    for b in range(1, batch):
        mask[b, seq - b:] = True
    return x, mask


def export_encoder(name, opset, folder=HERE, width=32, heads=4, cases=((2, 7), (3, 5))):
    """The encoder with symbolic batch and sequence extents; NAME.json holds the first case (inputs
    and PyTorch's output), NAME_N.json the others: the same file run at other extents."""
    torch.manual_seed(5)
    model = Encoder(width, heads).eval()
    path = os.path.join(folder, name + ".onnx")
    x, mask = encoder_inputs(*cases[0], width)
    axes = {"x": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"},
            "out": {0: "batch", 1: "seq"}}
    torch.onnx.export(model, (x, mask), path, opset_version=opset, input_names=["x", "mask"],
                      output_names=["out"], dynamic_axes=axes)
    for k, (batch, seq) in enumerate(cases):
        x, mask = encoder_inputs(batch, seq, width)
        with torch.no_grad():
            y = model(x, mask)
        suffix = "" if k == 0 else f"_{k}"
        with open(os.path.join(folder, name + suffix + ".json"), "w") as f:
            json.dump({"inputs": {"x": {"values": [round(v, 8) for v in x.flatten().tolist()],
                                        "shape": list(x.shape), "dtype": "float32"},
                                  "mask": {"values": mask.flatten().int().tolist(),
                                           "shape": list(mask.shape), "dtype": "bool"}},
                       "output": y.flatten().tolist(), "output_shape": list(y.shape)}, f)


def export_gpt(name, opset, folder=HERE):
    """tests/gpt_torch_cases.py's GPT (2 layers, width 8, causal attention, tanh GELU, tied output
    projection) returning its logits, seeded weights; a symbolic batch axis, T positions. NAME.json
    holds int64 tokens at batch 2, NAME_1.json at batch 3."""
    sys.path.insert(0, os.path.join(HERE, ".."))
    import gpt_torch_cases as g  # noqa: E402 (tests/ is not a package)

    class Logits(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(6)
            self.gpt = g.Gpt().eval()

        def forward(self, tokens):
            return self.gpt.logits(tokens)

    model = Logits()
    gen = torch.Generator().manual_seed(7)
    cases = [torch.randint(0, g.VOCAB, (b, g.T), generator=gen) for b in (2, 3)]
    torch.onnx.export(model, (cases[0],), os.path.join(folder, name + ".onnx"),
                      opset_version=opset, input_names=["tokens"], output_names=["logits"],
                      dynamic_axes={"tokens": {0: "batch"}, "logits": {0: "batch"}})
    for k, tokens in enumerate(cases):
        with torch.no_grad():
            y = model(tokens)
        with open(os.path.join(folder, name + ("" if k == 0 else f"_{k}") + ".json"), "w") as f:
            json.dump({"inputs": {"tokens": {"values": tokens.flatten().tolist(),
                                             "shape": list(tokens.shape), "dtype": "int64"}},
                       "output": y.flatten().tolist(), "output_shape": list(y.shape)}, f)


def mlp():
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 10))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 10))


def bn_cnn():
    bn = nn.BatchNorm2d(6)
    with torch.no_grad():  # running statistics and affine terms away from their defaults
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), bn,
                         nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 5), nn.Softmax(dim=1))


def conv_bn():
    """Conv-BatchNorm-ReLU twice, then global pooling and a Linear: BatchNorms that follow their
    convolutions (exported as nodes: weft folds them at bind)."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


def tensor_ops():
    """Transpose, Unsqueeze, ReduceMean, Concat, Pow, LayerNormalization, Gather, Where, Split, Add
    and Cast in one opset-17 graph, with fixed extents: ONNX Runtime is its reference (the test runs
    it), the script writes only the input."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),                  # (2, 4, 3)
        helper.make_node("Unsqueeze", ["t", "ax1"], ["u"]),                            # (2, 1, 4, 3)
        helper.make_node("ReduceMean", ["u"], ["m"], axes=[3], keepdims=1),            # (2, 1, 4, 1)
        helper.make_node("Concat", ["u", "m"], ["c"], axis=3),                         # (2, 1, 4, 4)
        helper.make_node("Pow", ["c", "two"], ["p"]),
        helper.make_node("LayerNormalization", ["p", "gamma", "beta"], ["ln"], axis=-1,
                         epsilon=1e-3),
        helper.make_node("Gather", ["ln", "rows"], ["g"], axis=2),                     # (2, 1, 2, 4)
        helper.make_node("Where", ["keep", "g", "half"], ["w"]),
        helper.make_node("Split", ["w"], ["s0", "s1"], axis=3),                        # (2, 1, 2, 2) x2
        helper.make_node("Add", ["s0", "s1"], ["a"]),
        helper.make_node("Cast", ["a"], ["out"], to=TensorProto.FLOAT),
    ]
    inits = [
        helper.make_tensor("ax1", TensorProto.INT64, [1], [1]),
        helper.make_tensor("two", f, [], [2.0]),
        helper.make_tensor("gamma", f, [4], [1.0, 0.5, 2.0, 1.5]),
        helper.make_tensor("beta", f, [4], [0.1, -0.2, 0.0, 0.3]),
        helper.make_tensor("rows", TensorProto.INT64, [2], [2, 0]),
        helper.make_tensor("keep", TensorProto.BOOL, [4], [1, 0, 1, 1]),
        helper.make_tensor("half", f, [], [0.5]),
    ]
    graph = helper.make_graph(nodes, "tensor_ops",
                              [helper.make_tensor_value_info("x", f, [2, 3, 4])],
                              [helper.make_tensor_value_info("out", f, [2, 1, 2, 2])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              os.path.join(HERE, "tensor_ops.onnx"))
    torch.manual_seed(5)
    x = torch.randn(2, 3, 4)
    with open(os.path.join(HERE, "tensor_ops.json"), "w") as out:
        json.dump({"input": [round(v, 8) for v in x.flatten().tolist()], "input_shape": [2, 3, 4]},
                  out)


def shape_ops(folder=HERE):
    """Slice, Expand and ConstantOfShape on a symbolic batch (hand-made, opset 13): x (batch, 6)
    sliced to columns 1..4 and to all rows (ends past the extent), a column expanded to 3, a
    ConstantOfShape of Shape(x) filled with 2, an Expand whose target is Where(Equal(...)) over the
    shape, a Reshape whose target slices Shape(x) (the symbolic batch, and the last extent); shape_ops.json at batch 2, shape_ops_1.json at batch 5 (ONNX Runtime the reference)."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    big = 2 ** 62
    inits = [helper.make_tensor("one", i64, [1], [1]), helper.make_tensor("four", i64, [1], [4]),
             helper.make_tensor("axis1", i64, [1], [1]), helper.make_tensor("zero", i64, [1], [0]),
             helper.make_tensor("big", i64, [1], [big]), helper.make_tensor("axis0", i64, [1], [0]),
             helper.make_tensor("minus_one", i64, [1], [-1]),
             helper.make_tensor("target", i64, [2], [1, 3]),
             helper.make_tensor("two_i", i64, [1], [2]),
             helper.make_tensor("two", f, [1], [2.0])]
    nodes = [
        helper.make_node("Slice", ["x", "one", "four", "axis1"], ["mid"]),          # (N, 3)
        helper.make_node("Slice", ["mid", "zero", "big", "axis0"], ["rows"]),        # whole axis
        helper.make_node("Slice", ["x", "zero", "one", "axis1"], ["col"]),           # (N, 1)
        helper.make_node("Expand", ["col", "target"], ["cols"]),                     # (N, 3)
        helper.make_node("Shape", ["rows"], ["s"]),
        helper.make_node("ConstantOfShape", ["s"], ["twos"],
                         value=helper.make_tensor("v", f, [1], [2.0])),
        helper.make_node("Mul", ["rows", "twos"], ["a"]),
        # Where(Equal(shape, -1), 1, shape): a target equal to the shape itself
        helper.make_node("Equal", ["s", "minus_one"], ["unknown"]),
        helper.make_node("Where", ["unknown", "one", "s"], ["same"]),
        helper.make_node("Expand", ["cols", "same"], ["b"]),
        # Reshape(b, (Slice(Shape(x))[0:1], Slice(Shape(x))[-1:] / 2 + (4 N) mod 2)): PyTorch
        # 2's exporter slices shapes and checks divisibility so; the same (N, 3)
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Slice", ["sx", "zero", "one"], ["n"]),
        helper.make_node("Slice", ["sx", "minus_one", "big", "axis0"], ["width"]),
        helper.make_node("Div", ["width", "two_i"], ["half"]),
        helper.make_node("Mul", ["n", "four"], ["n4"]),
        helper.make_node("Mod", ["n4", "two_i"], ["none"]),
        helper.make_node("Add", ["half", "none"], ["half2"]),
        helper.make_node("Concat", ["n", "half2"], ["nb"], axis=0),
        helper.make_node("Reshape", ["b", "nb"], ["b2"]),
        # Unsqueeze then Squeeze axis 1 of a value computed at run time: the same (N, 3)
        helper.make_node("Unsqueeze", ["b2", "axis1"], ["b3"]),
        helper.make_node("Squeeze", ["b3", "axis1"], ["b4"]),
        helper.make_node("Add", ["a", "b4"], ["out"]),
    ]
    graph = helper.make_graph(nodes, "shape_ops",
                              [helper.make_tensor_value_info("x", f, ["batch", 6])],
                              [helper.make_tensor_value_info("out", f, ["batch", 3])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
              os.path.join(folder, "shape_ops.onnx"))
    torch.manual_seed(9)
    for k, batch in enumerate((2, 5)):
        x = torch.randn(batch, 6)
        with open(os.path.join(folder, "shape_ops" + ("" if k == 0 else f"_{k}") + ".json"),
                  "w") as out:
            json.dump({"input": [round(v, 8) for v in x.flatten().tolist()],
                       "input_shape": [batch, 6]}, out)


def refused():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    node = helper.make_node("Hardmax", ["x"], ["y"], name="the_hardmax")
    onnx.save(helper.make_model(helper.make_graph([node], "g", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 13)]),
              os.path.join(HERE, "unsupported_op.onnx"))
    xi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 5, 5])
    w = helper.make_tensor("w", TensorProto.FLOAT, [1, 1, 3, 3], [0.1] * 9)
    yo = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="the_conv", pads=[1, 1, 0, 0])
    onnx.save(helper.make_model(helper.make_graph([conv], "g", [xi], [yo], [w]),
                                opset_imports=[helper.make_opsetid("", 13)]),
              os.path.join(HERE, "asymmetric_pads.onnx"))
    # shape arithmetic dividing by a known zero
    six = helper.make_tensor("six", TensorProto.INT64, [1], [6])
    zero = helper.make_tensor("zero", TensorProto.INT64, [1], [0])
    div = helper.make_node("Div", ["six", "zero"], ["shape"], name="the_div")
    reshape = helper.make_node("Reshape", ["x", "shape"], ["y"])
    onnx.save(helper.make_model(helper.make_graph([div, reshape], "g", [x], [y], [six, zero]),
                                opset_imports=[helper.make_opsetid("", 13)]),
              os.path.join(HERE, "divide_by_zero.onnx"))
    relu = helper.make_node("Relu", ["x"], ["y"])
    onnx.save(helper.make_model(helper.make_graph([relu], "g", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 9)]),
              os.path.join(HERE, "opset9.onnx"))
    # a reshape target of batch + 1 rows: no product of the symbolic extents
    xn = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    yn = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    consts = [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
              helper.make_tensor("one", TensorProto.INT64, [1], [1]),
              helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1])]
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"]),
             helper.make_node("Unsqueeze", ["n", "zero_axes"], ["n1"]),
             helper.make_node("Add", ["n1", "one"], ["rows"], name="the_add"),
             helper.make_node("Concat", ["rows", "minus_one"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    consts.append(helper.make_tensor("zero_axes", TensorProto.INT64, [1], [0]))
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [xn], [yn], consts),
                                opset_imports=[helper.make_opsetid("", 13)]),
              os.path.join(HERE, "symbolic_sum.onnx"))
    # an Expand to a negative extent (a finding of fuzz/onnx_fuzzer: it once threw length_error)
    target = helper.make_tensor("target", TensorProto.INT64, [2], [-3, 4])
    expand = helper.make_node("Expand", ["x", "target"], ["y"], name="the_expand")
    onnx.save(helper.make_model(helper.make_graph([expand], "g", [x], [yn], [target]),
                                opset_imports=[helper.make_opsetid("", 13)]),
              os.path.join(HERE, "expand_negative.onnx"))


def save_hand_made(name, nodes, inputs, inits):
    """A hand-made opset-17 graph of float32 inputs [(name, shape)] and initializers, output y,
    with random inputs in name.json (an input named mask gets -4 or 0): ONNX Runtime the
    reference."""
    f = TensorProto.FLOAT
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info(n, f, s)
                                            for n, s in inputs],
                              [helper.make_tensor_value_info("y", f, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              os.path.join(HERE, name + ".onnx"))
    torch.manual_seed(9)
    values = {}
    for n, shape in inputs:
        t = torch.randn(*shape) if n != "mask" else -4.0 * (torch.rand(*shape) < 0.3).float()
        values[n] = {"values": [round(v, 6) for v in t.flatten().tolist()], "shape": shape,
                     "dtype": "float32"}
    with open(os.path.join(HERE, name + ".json"), "w") as out:
        json.dump({"inputs": values}, out)


def attention_folds():
    """Attention written out by hand (opset 17, fixed extents; ONNX Runtime the reference, the
    script writes only the inputs): what the import folds into one Attention with
    WEFT_ONNX_FUSE_ATTENTION=1 (attention_sdpa: q and k^T each scaled, the mask added) and what it
    must leave as it is (attention_scaled_after_mask: the scale after the mask;
    attention_mask_broadcasts: 3-D scores plus a 4-D mask, which adds an axis)."""
    f = TensorProto.FLOAT
    perm = helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2])
    scale = [helper.make_tensor("s", f, [], [0.7]), helper.make_tensor("c", f, [], [0.5])]
    qkv = [("q", [2, 3, 5, 4]), ("k", [2, 3, 5, 4]), ("v", [2, 3, 5, 4])]
    save_hand_made("attention_sdpa", [
        helper.make_node("Mul", ["q", "s"], ["qs"]), perm,
        helper.make_node("Mul", ["kt", "s"], ["kts"]),
        helper.make_node("MatMul", ["qs", "kts"], ["scores"]),
        helper.make_node("Add", ["scores", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"])], qkv + [("mask", [2, 1, 1, 5])], scale)
    save_hand_made("attention_scaled_after_mask", [
        perm, helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Add", ["scores", "mask"], ["masked"]),
        helper.make_node("Mul", ["masked", "c"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"])], qkv + [("mask", [2, 1, 1, 5])], scale)
    save_hand_made("attention_mask_broadcasts", [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Add", ["scores", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"])],
        [("q", [6, 5, 4]), ("k", [6, 5, 4]), ("v", [6, 5, 4]), ("mask", [2, 1, 5, 5])], [])


def packed_heads():
    """PyTorch 2's export of nn.MultiheadAttention's packed projection p (T 5, B 2, 3E 24; H 2,
    D 4), by hand: unflattened to (T, B, 3, E), a leading axis added and swapped with the 3,
    squeezed, q, k and v gathered at 0, 1 and -1, each seen as (T, B*H, D) and transposed to
    (B*H, T, D); y = q + k + v's position 2 (a Gather of a one-element list)."""
    i64 = TensorProto.INT64
    consts = [helper.make_tensor("unflat", i64, [4], [5, 2, 3, 8]),
              helper.make_tensor("zero_axis", i64, [1], [0]),
              helper.make_tensor("three_axis", i64, [1], [3]),
              helper.make_tensor("heads", i64, [3], [5, 4, 4]),
              helper.make_tensor("at2", i64, [1], [2])]
    nodes = [helper.make_node("Reshape", ["p", "unflat"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "zero_axis"], ["u"]),
             helper.make_node("Transpose", ["u"], ["t"], perm=[3, 1, 2, 0, 4]),
             helper.make_node("Squeeze", ["t", "three_axis"], ["sq"])]
    for part, index in (("q", 0), ("k", 1), ("v", -1)):
        consts.append(helper.make_tensor(part + "_at", i64, [], [index]))
        nodes += [helper.make_node("Gather", ["sq", part + "_at"], [part], axis=0),
                  helper.make_node("Reshape", [part, "heads"], [part + "3"]),
                  helper.make_node("Transpose", [part + "3"], [part + "h"], perm=[1, 0, 2])]
    nodes += [helper.make_node("Gather", ["vh", "at2"], ["w"], axis=1),
              helper.make_node("Add", ["qh", "kh"], ["qk"]),
              helper.make_node("Add", ["qk", "w"], ["y"])]
    save_hand_made("packed_heads", nodes, [("p", [5, 2, 24])], consts)


def torchvision_models(folder):
    import torchvision
    for opset in (13, 17):
        torch.manual_seed(3)
        export(torchvision.models.resnet18(), torch.randn(2, 3, 224, 224),
               f"resnet18_opset{opset}", opset, folder=folder)
        torch.manual_seed(4)
        export(torchvision.models.mobilenet_v2(), torch.randn(2, 3, 224, 224),
               f"mobilenet_v2_opset{opset}", opset, folder=folder)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--torchvision":
        torchvision_models(sys.argv[2])
        return
    torch.manual_seed(0)
    export(mlp(), torch.randn(3, 64), "mlp", 13)
    torch.manual_seed(0)
    export(mlp(), torch.randn(3, 64), "mlp_ext", 13, external=True)
    torch.manual_seed(1)
    export(cnn(), torch.randn(2, 1, 8, 8), "cnn", 17)
    torch.manual_seed(2)
    export(bn_cnn(), torch.randn(2, 3, 9, 9), "bn_cnn", 13)
    # the same three at the other of opsets 13 and 17
    torch.manual_seed(0)
    export(mlp(), torch.randn(3, 64), "mlp_opset17", 17)
    torch.manual_seed(1)
    export(cnn(), torch.randn(2, 1, 8, 8), "cnn_opset13", 13)
    torch.manual_seed(2)
    export(bn_cnn(), torch.randn(2, 3, 9, 9), "bn_cnn_opset17", 17)
    torch.manual_seed(8)
    model = conv_bn()
    for bn in (model[1], model[4]):  # running statistics that are not the initial ones
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    export(model, torch.randn(2, 3, 6, 6), "conv_bn", 13, keep_bn=True)
    export_encoder("encoder", 13)
    export_encoder("encoder_opset17", 17)
    export_gpt("gpt", 17)
    export_gpt("gpt_opset14", 14)  # PyTorch 1.13 exports triu at opset 14 and later
    refused()
    tensor_ops()
    attention_folds()
    packed_heads()
    shape_ops()
    # fuzz/corpus/onnx seeds (with the models above): one whose extents are all given, so that the
    # fuzzer binds and runs what it makes of it
    torch.manual_seed(1)
    export(cnn(), torch.randn(2, 1, 8, 8), "cnn_fixed", 13, dynamic=False,
           folder=os.path.join(HERE, "..", "..", "fuzz", "corpus", "onnx"))
    os.remove(os.path.join(HERE, "..", "..", "fuzz", "corpus", "onnx", "cnn_fixed.json"))


if __name__ == "__main__":
    main()
