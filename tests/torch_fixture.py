"""What the scripts that write PyTorch fixtures share (tests/rnn_torch_cases.py,
tests/conv_pool_torch_cases.py, tests/resnet_torch_cases.py, tests/batch_norm_torch_cases.py):
random float32 values held in float64, so that weft's float32 and float64 runs start from the same
numbers, and a tensor's values as C++ initializer text.
"""
import torch


def f32(shape, gen, scale=1.0):
    return ((torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * scale).float().double()


def values(t):
    v = [repr(float(x)) for x in t.detach().reshape(-1).tolist()]
    rows = [", ".join(v[k:k + 4]) for k in range(0, len(v), 4)]
    return (",\n" + " " * 10).join(rows)
