#!/usr/bin/env python3
"""The PyTorch side of bench/resnet_bench: the same residual networks, batches, optimizer and
thread count, built as torchvision builds ResNet-18 (examples/common/resnet.h builds weft's).

Usage: torch_resnet_peer.py [--row=NAME] THREADS STEPS ROUNDS FASHION_STEPS. Prints one JSON
object: {"available": bool, "rows": [{"name": str, "ms": float, "peak_bytes": int}, ...]} with the rows of
resnet_bench in its order: training steps (ms per step: the median of ROUNDS rounds of STEPS
steps; ResNet-18's again with its forward under torch.autocast("cpu", dtype=torch.bfloat16); the
Fashion-MNIST row times FASHION_STEPS steps once), then inference (ms per batch,
eager and with torch.jit.freeze, which folds BatchNorm into the convolutions as weft's bind
does). peak_bytes: the growth of peak resident memory while the row ran; each training row runs
in a process of its own (this script with --row=NAME), since a process's peak resident memory
only grows: measured in one process, a row after a larger one read that row's peak (the
Fashion-MNIST row's 151.6 MB against weft's 426.4 in bench/README.md's runs before 2026-12-06).
"""
import json
import subprocess
import sys

from peer_common import hello, import_torch, peak_growth, rounds_ms, start_peak


def resnet(torch, torchvision, blocks, width, classes, small_stem, channels):
    """torchvision's ResNet with basic blocks; a small stem is a 3x3 convolution without pooling."""
    from torchvision.models.resnet import BasicBlock, ResNet

    net = ResNet(BasicBlock, blocks + [0] * (4 - len(blocks)), num_classes=classes)
    if len(blocks) < 4 or width != 64:  # rebuild the stages for another width or depth
        net.inplanes = width
        stages = [net._make_layer(BasicBlock, width << i, n, stride=1 if i == 0 else 2)
                  for i, n in enumerate(blocks)]
        for i in range(4):
            setattr(net, f"layer{i + 1}", stages[i] if i < len(stages) else torch.nn.Identity())
        net.fc = torch.nn.Linear(width << (len(blocks) - 1), classes)
        net.bn1 = torch.nn.BatchNorm2d(width)
    if small_stem:
        net.conv1 = torch.nn.Conv2d(channels, width, 3, 1, 1, bias=False)
        net.maxpool = torch.nn.Identity()
    elif channels != 3:
        net.conv1 = torch.nn.Conv2d(channels, width, 7, 2, 3, bias=False)
    return net


def train_row(torch, net, shape, steps, rounds, mixed=False):
    """ms per SGD step, and the peak growth; with `mixed`, the forward and the loss under
    torch.autocast("cpu", dtype=torch.bfloat16) (float32 parameters, as weft's master weights)."""
    before = start_peak()
    x, y = torch.randn(*shape), torch.randint(0, 10, (shape[0],))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    net.train()

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed):
            loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()

    ms = rounds_ms(step, steps, rounds, warmup=2)
    return ms, peak_growth(before)


def infer_rows(torch, net, shape, rounds):
    net.eval()
    x = torch.randn(*shape)
    rows = []
    with torch.no_grad():
        rows.append(rounds_ms(lambda: net(x), 1, rounds, warmup=2))
        frozen = torch.jit.freeze(torch.jit.script(net))
        rows.append(rounds_ms(lambda: frozen(x), 1, rounds, warmup=3))
    return rows


# The training rows: name -> (blocks, width, the small stem's input shape, mixed, Fashion-MNIST's:
# FASHION_STEPS steps once instead of ROUNDS rounds of STEPS).
TRAIN_ROWS = {
    "resnet18 cifar train b64": ([2, 2, 2, 2], 64, (64, 3, 32, 32), False, False),
    "same, bf16-mixed": ([2, 2, 2, 2], 64, (64, 3, 32, 32), True, False),
    "fashion resnet train b128": ([2, 2, 2], 32, (128, 1, 28, 28), False, True),
}


def one_train_row(torch, torchvision, name, steps, rounds, fashion_steps):
    blocks, width, shape, mixed, fashion = TRAIN_ROWS[name]
    torch.manual_seed(0)
    net = resnet(torch, torchvision, blocks, width, 10, True, shape[1])
    steps, rounds = (fashion_steps, 1) if fashion else (steps, rounds)
    ms, peak = train_row(torch, net, shape, steps, rounds, mixed=mixed)
    return {"name": name, "ms": ms, "peak_bytes": peak}


def main():
    row = sys.argv[1][len("--row="):] if sys.argv[1].startswith("--row=") else None
    args = sys.argv[2:6] if row else sys.argv[1:5]
    threads, steps, rounds, fashion_steps = (int(a) for a in args)
    torch = import_torch(threads, modules=("torchvision",))
    if torch is None:
        return
    import torchvision
    if row:
        print(json.dumps(one_train_row(torch, torchvision, row, steps, rounds, fashion_steps)))
        return
    rows = []
    for name in TRAIN_ROWS:
        done = subprocess.run([sys.executable, __file__, "--row=" + name] + args, check=True,
                              stdout=subprocess.PIPE, text=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    torch.manual_seed(0)
    imagenet = resnet(torch, torchvision, [2, 2, 2, 2], 64, 1000, False, 3)
    for batch in (1, 32):
        eager, frozen = infer_rows(torch, imagenet, (batch, 3, 224, 224), rounds)
        rows.append({"name": f"resnet18 224 infer b{batch}", "ms": eager, "frozen_ms": frozen})
    print(json.dumps(dict(hello(torch), rows=rows)))


if __name__ == "__main__":
    main()
