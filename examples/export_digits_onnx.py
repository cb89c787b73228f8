#!/usr/bin/env python3
"""Trains a small MLP on examples/data/digits.csv in PyTorch and exports it as ONNX: a model
trained elsewhere, for embed_infer --onnx (README, "Running a model trained elsewhere").

  python3 examples/export_digits_onnx.py [OUT.onnx]      # default digits.onnx; Debian's PyTorch
  bazel run //examples:embed_infer -- --onnx=digits.onnx --input_scale=16

The rows are 64 pixels of 0..16 and a label; the model reads them divided by 16.
"""
import os
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "digits.onnx"
    rows = torch.tensor([[float(v) for v in line.split(",")]
                         for line in open(os.path.join(HERE, "data", "digits.csv"))
                         if line.strip() and not line[0].isalpha()])
    x, y = rows[:, :64] / 16, rows[:, 64].long()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(30):
        for i in range(0, len(x), 64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[i:i + 64]), y[i:i + 64]).backward()
            opt.step()
    model.eval()
    accuracy = (model(x).argmax(1) == y).float().mean().item()
    torch.onnx.export(model, x[:1], out, opset_version=13, input_names=["pixels"],
                      output_names=["logits"], dynamic_axes={"pixels": {0: "batch"}})
    print(f"{out}: trained to {100 * accuracy:.1f}% on the training rows (PyTorch)")


if __name__ == "__main__":
    main()
