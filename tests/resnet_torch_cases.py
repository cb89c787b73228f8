#!/usr/bin/env python3
"""Writes tests/resnet_torch_cases.h: PyTorch's numbers for a residual block and a small ResNet
built as examples/common/resnet.h builds them (conv without bias, BatchNorm with its relu, basic
blocks with identity or strided 1x1 projection shortcuts, global average pooling, a dense layer),
in training mode (BatchNorm normalizes with the batch's statistics), in float64 from float32
values. The oracle of resnet_torch_test: every argument by weft's name, the outputs, the running
statistics after the step (PyTorch's momentum 0.1 is weft's 0.9), and the gradients of every
parameter and of the data.

  block:  data (2, 4, 6, 6) -> basic block (4 filters, identity shortcut) -> y;
          L = sum(y * gy)
  resnet: data (3, 1, 8, 8) -> ResNet(stem 4, stages [1, 1], 3 classes) -> logits;
          L = sum over samples of softmax cross-entropy (weft's SoftmaxCrossEntropy per sample)

    /usr/bin/python3 tests/resnet_torch_cases.py > tests/resnet_torch_cases.h   # Debian's PyTorch 1.13
"""
import torch
from torch import nn

from torch_fixture import f32, values


class ConvBn(nn.Module):
    def __init__(self, name, cin, cout, kernel, stride, relu):
        super().__init__()
        self.name, self.relu = name, relu
        self.conv = nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)  # eps 1e-5, momentum 0.1

    def forward(self, x):
        y = self.bn(self.conv(x))
        return torch.relu(y) if self.relu else y

    def weft_arrays(self):
        n = self.name
        return {n + "_conv_weight": self.conv.weight, n + "_bn_gamma": self.bn.weight,
                n + "_bn_beta": self.bn.bias, n + "_bn_moving_mean": self.bn.running_mean,
                n + "_bn_moving_var": self.bn.running_var}


class Block(nn.Module):
    def __init__(self, name, cin, cout, stride):
        super().__init__()
        self.a = ConvBn(name + "_a", cin, cout, 3, stride, True)
        self.b = ConvBn(name + "_b", cout, cout, 3, 1, False)
        self.proj = ConvBn(name + "_proj", cin, cout, 1, stride, False) if stride != 1 or cin != cout else None

    def forward(self, x):
        return torch.relu(self.b(self.a(x)) + (self.proj(x) if self.proj else x))

    def parts(self):
        return [self.a, self.b] + ([self.proj] if self.proj else [])


class ResNet(nn.Module):
    def __init__(self, width, blocks, classes):
        super().__init__()
        self.stem = ConvBn("stem", 1, width, 3, 1, True)
        layers, cin = [], width
        for s, n in enumerate(blocks):
            for b in range(n):
                cout = width << s
                layers.append(Block("stage%d_block%d" % (s + 1, b + 1), cin, cout, 2 if s > 0 and b == 0 else 1))
                cin = cout
        self.blocks = nn.ModuleList(layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.fc(x.mean(dim=(2, 3)))

    def parts(self):
        return [self.stem] + [p for b in self.blocks for p in b.parts()]


def randomize(module, gen):
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(f32(p.shape, gen, 0.5) + (1.0 if name.endswith("bn.weight") else 0.0))
        for name, b in module.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(f32(b.shape, gen, 0.2))
            elif name.endswith("running_var"):
                b.copy_(f32(b.shape, gen, 0.2) + 1.0)


def arrays(parts):
    out = {}
    for p in parts:
        out.update(p.weft_arrays())
    return out


def block_case(gen):
    block = Block("block", 4, 4, 1).double()
    randomize(block, gen)
    before = {k: v.detach().clone() for k, v in arrays(block.parts()).items()}
    x = f32((2, 4, 6, 6), gen).requires_grad_()
    y = block(x)
    gy = f32(y.shape, gen)
    (y * gy).sum().backward()
    return x, y, gy, before, block.parts()


def resnet_case(gen):
    net = ResNet(4, [1, 1], 3).double()
    randomize(net, gen)
    with torch.no_grad():
        net.fc.weight.copy_(f32(net.fc.weight.shape, gen, 0.5))
        net.fc.bias.copy_(f32(net.fc.bias.shape, gen, 0.5))
    before = arrays(net.parts())
    before = {k: v.detach().clone() for k, v in before.items()}
    before.update(fc_weight=net.fc.weight.detach().clone(), fc_bias=net.fc.bias.detach().clone())
    x = f32((3, 1, 8, 8), gen).requires_grad_()
    label = torch.tensor([2, 0, 1])
    logits = net(x)
    loss = nn.functional.cross_entropy(logits, label, reduction="none")
    loss.sum().backward()
    after = arrays(net.parts())
    after.update(fc_weight=net.fc.weight, fc_bias=net.fc.bias)
    return x, label, loss, before, after


def emit(key, t):
    print('        {"%s", {%s},\n         {%s}},' % (key, ", ".join(str(s) for s in t.shape), values(t)))


def emit_case(name, inputs, after):
    """Arguments (before the step), then outputs, moving statistics after it, gradients."""
    print('      {"%s", {' % name)
    for key, t in inputs.items():
        emit(key, t)
    for key, t in after.items():
        if key.endswith("moving_mean") or key.endswith("moving_var"):
            emit("after." + key, t)
        elif t.grad is not None:
            emit("grad." + key, t.grad)
    print("      }},")


def main():
    gen = torch.Generator().manual_seed(20261205)
    print("// Generated by tests/resnet_torch_cases.py from PyTorch " + torch.__version__ + " (float64); do not edit.")
    print("#pragma once\n\n#include <cstdint>\n#include <vector>\n\nnamespace weft::testing::resnet_cases {\n")
    print("struct Tensor {\n  const char* name;\n  std::vector<int64_t> shape;\n  std::vector<double> values;\n};\n")
    print("struct Case {\n  const char* name;\n  std::vector<Tensor> tensors;\n};\n")
    print("inline const std::vector<Case>& Cases() {\n  static const auto* cases = new std::vector<Case>{")
    x, y, gy, before, parts = block_case(gen)
    after = arrays(parts)
    emit_case("block", dict(data=x, **before, output=y, out_grad=gy, **{"grad.data": x.grad}), after)
    x, label, loss, before, after = resnet_case(gen)
    emit_case("resnet", dict(data=x, label=label.double(), **before, output=loss, **{"grad.data": x.grad}), after)
    print("  };\n  return *cases;\n}\n\n}  // namespace weft::testing::resnet_cases")


if __name__ == "__main__":
    main()
