#!/usr/bin/env python3
"""The PyTorch side of bench/resnet_bench: the same residual networks, batches, optimizer and
thread count, built as torchvision builds ResNet-18 (examples/common/resnet.h builds weft's).

Usage: torch_resnet_peer.py THREADS STEPS ROUNDS FASHION_STEPS. Prints one JSON object:
{"available": bool, "rows": [{"name": str, "ms": float, "peak_bytes": int}, ...]} with the rows of
resnet_bench in its order: training steps (ms per step: the median of ROUNDS rounds of STEPS
steps; ResNet-18's again with its forward under torch.autocast("cpu", dtype=torch.bfloat16); the
Fashion-MNIST row times FASHION_STEPS steps once), then inference (ms per batch,
eager and with torch.jit.freeze, which folds BatchNorm into the convolutions as weft's bind
does). peak_bytes: the growth of peak resident memory while the row ran.
"""
import json
import sys

from peer_common import hello, import_torch, peak_growth, rounds_ms, rss_bytes


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
    before = rss_bytes()
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


def main():
    threads, steps, rounds, fashion_steps = (int(a) for a in sys.argv[1:5])
    torch = import_torch(threads, modules=("torchvision",))
    if torch is None:
        return
    import torchvision
    torch.manual_seed(0)
    rows = []
    r18 = resnet(torch, torchvision, [2, 2, 2, 2], 64, 10, True, 3)
    ms, peak = train_row(torch, r18, (64, 3, 32, 32), steps, rounds)
    rows.append({"name": "resnet18 cifar train b64", "ms": ms, "peak_bytes": peak})
    ms, peak = train_row(torch, r18, (64, 3, 32, 32), steps, rounds, mixed=True)
    rows.append({"name": "same, bf16-mixed", "ms": ms, "peak_bytes": peak})
    fashion = resnet(torch, torchvision, [2, 2, 2], 32, 10, True, 1)
    ms, peak = train_row(torch, fashion, (128, 1, 28, 28), fashion_steps, 1)
    rows.append({"name": "fashion resnet train b128", "ms": ms, "peak_bytes": peak})
    imagenet = resnet(torch, torchvision, [2, 2, 2, 2], 64, 1000, False, 3)
    for batch in (1, 32):
        eager, frozen = infer_rows(torch, imagenet, (batch, 3, 224, 224), rounds)
        rows.append({"name": f"resnet18 224 infer b{batch}", "ms": eager, "frozen_ms": frozen})
    print(json.dumps(dict(hello(torch), rows=rows)))


if __name__ == "__main__":
    main()
