#!/usr/bin/env python3
"""The PyTorch side of bench/train_bench: the same MLPs and LSTM, batches, optimizer and thread count.

Usage: torch_train_peer.py THREADS STEPS [ROUNDS]. ms_per_step is the median of ROUNDS (default 1)
rounds of STEPS steps. Prints one JSON object:
{"available": bool, "blas": str, "nets": [{"name": str, "ms_per_step": float, "peak_bytes": int}, ...]}.
peak_bytes is the growth of the process's peak resident memory while the net was built and
trained (peer_common.start_peak and peak_growth: the peak since the net's start, minus the
resident size then).
"""
import json
import sys

from peer_common import blas_libraries, hello, import_torch, peak_growth, rounds_ms, start_peak

NETS = [("mlp 64-256-256-10", [64, 256, 256, 10]), ("mlp 784-1024-1024-10", [784, 1024, 1024, 10]),
        ("lstm 2x bidi H128 T32", None)]
BATCH = 128
LSTM_STEPS, LSTM_BATCH, LSTM_INPUT, LSTM_HIDDEN = 32, 32, 64, 128


def mlp(torch, sizes):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers), torch.randn(BATCH, sizes[0]), torch.randint(0, sizes[-1], (BATCH,))


def lstm(torch):
    """A 2-layer bidirectional LSTM (zero initial states) and a dense head on its last step."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(LSTM_INPUT, LSTM_HIDDEN, num_layers=2, bidirectional=True)
            self.fc = torch.nn.Linear(2 * LSTM_HIDDEN, 10)

        def forward(self, x):
            return self.fc(self.lstm(x)[0][-1])

    x = torch.randn(LSTM_STEPS, LSTM_BATCH, LSTM_INPUT)
    return Net(), x, torch.randint(0, 10, (LSTM_BATCH,))


def run(torch, sizes, steps, rounds):
    before = start_peak()
    net, x, y = mlp(torch, sizes) if sizes else lstm(torch)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()

    ms = rounds_ms(step, steps, rounds)
    return ms, peak_growth(before)


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    torch = import_torch(threads)
    if torch is None:
        return
    blas = blas_libraries(torch)
    nets = []
    for name, sizes in NETS:
        ms, peak = run(torch, sizes, steps, rounds)
        nets.append({"name": name, "ms_per_step": ms, "peak_bytes": peak})
    print(json.dumps(dict(hello(torch), blas=blas, nets=nets)))


if __name__ == "__main__":
    main()
