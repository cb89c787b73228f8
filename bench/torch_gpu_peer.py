#!/usr/bin/env python3
"""The PyTorch side of bench/gpu_bench: the same workloads on the same GPU, eager mode; and the
8-op chain of the fusion rows also through torch.compile.

Usage: torch_gpu_peer.py REPS [PART...]: the parts gpu_bench runs (mlp, rnn, attention,
layernorm, tiny, relu, chain; none named: all of those), gpt2=B, GPT-2 124M's training step at
batch B ("gpt2 124M train step bB bfloat16", eager and " compile"), and resnet50=B, ResNet-50's
training step at batch B ("resnet50 train step bB float32", and "... bfloat16": autocast,
channels-last). Prints one JSON object on its last line:
{"available": bool, "version": str, "device": str, "results": {workload: value, ...}} with the
workload names gpu_bench uses (ms per step, us per op, GB/s; the MLP steps also as one
CUDA graph replayed, under "... trainer, CUDA graph", with eager again under "... trainer, no
graph"; the chain: "chain forward ms eager",
"chain forward ms compile", "chain backward ms eager", "chain backward ms compile"; a compile
that fails leaves its keys out and says why in "chain compile error"; causal attention through
F.scaled_dot_product_attention under "attention B8 H12 T1024 D64 causal fwd+bwd DTYPE").
"""
import json
import statistics
import sys
import time

from peer_common import import_torch

NETS = [("64-256-256-10", [64, 256, 256, 10], 128),
        ("784-1024-1024-10", [784, 1024, 1024, 10], 128),
        ("4096-4096-4096-10", [4096, 4096, 4096, 10], 1024)]


def time_ms(torch, reps, n, fn):
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3 / n)
    return statistics.median(times)


def mlp_step(torch, sizes, batch, dtype, reps):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    net = torch.nn.Sequential(*layers).cuda().to(dtype)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, sizes[0], device="cuda", dtype=dtype)
    y = torch.randint(0, sizes[-1], (batch,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=False)
        torch.nn.functional.cross_entropy(net(x).float(), y, reduction="sum").backward()
        opt.step()

    for _ in range(10):
        step()
    eager = time_ms(torch, reps, 50, step)
    # The same step captured once and replayed (PyTorch's whole-network capture: warm-up on a side
    # stream, then torch.cuda.graph around zero_grad, forward, backward and the optimizer's step).
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(10):
        graph.replay()
    return eager, time_ms(torch, reps, 50, graph.replay)


def rnn_step(torch, mode, precision, h, reps):
    """Forward and backward of a 2-layer bidirectional LSTM or GRU, T64 N64 I512 of state size h
    (cuDNN), in precision "float32" (strict), "tf32" or "bfloat16"."""
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    cls = torch.nn.LSTM if mode == "lstm" else torch.nn.GRU
    net = cls(512, h, num_layers=2, bidirectional=True).cuda().to(dtype)
    x = torch.empty(64, 64, 512, device="cuda", dtype=dtype).uniform_(-0.05, 0.05).requires_grad_()
    dy = torch.ones(64, 64, 2 * h, device="cuda", dtype=dtype)

    def step():
        y, _ = net(x)
        y.backward(dy)

    for _ in range(3):
        step()
    ms = time_ms(torch, reps, 10, step)
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default
    return ms


def attention_step(torch, dtype, reps):
    """Forward and backward (d_q, d_k, d_v for a fixed out_grad) of causal attention over q, k, v
    of (8, 12, 1024, 64): F.scaled_dot_product_attention, whichever backend PyTorch picks."""
    q, k, v = (torch.empty(8, 12, 1024, 64, device="cuda", dtype=dtype).uniform_(-1, 1)
               .requires_grad_() for _ in range(3))
    dy = torch.ones(8, 12, 1024, 64, device="cuda", dtype=dtype)

    def step():
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.autograd.grad(y, (q, k, v), dy)

    for _ in range(3):
        step()
    return time_ms(torch, reps, 10, step)


def layernorm_step(torch, reps):
    """Forward and backward (d_x, d_weight, d_bias for a fixed out_grad) of F.layer_norm over
    (8192, 768) bfloat16 data with bfloat16 weight and bias."""
    x = torch.empty(8192, 768, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
    x.requires_grad_()
    w = torch.ones(768, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.zeros(768, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.ones_like(x)

    def step():
        y = torch.nn.functional.layer_norm(x, (768,), w, b)
        torch.autograd.grad(y, (x, w, b), dy)

    for _ in range(3):
        step()
    return time_ms(torch, reps, 10, step)


def resnet50(torch):
    """torchvision's resnet50 (bottlenecks of 3, 4, 6, 3 blocks, the stride in the 3x3
    convolution, 1,000 classes), written out: the GPU machine's PyTorch may come without
    torchvision."""
    nn = torch.nn

    def conv_bn(cin, cout, k, stride, relu):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*layers, *([nn.ReLU(inplace=True)] if relu else []))

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            self.f = nn.Sequential(conv_bn(cin, width, 1, 1, True),
                                   conv_bn(width, width, 3, stride, True),
                                   conv_bn(width, 4 * width, 1, 1, False))
            project = stride != 1 or cin != 4 * width
            self.proj = conv_bn(cin, 4 * width, 1, stride, False) if project else nn.Identity()

        def forward(self, x):
            return torch.relu(self.f(x) + self.proj(x))

    layers, cin = [conv_bn(3, 64, 7, 2, True), nn.MaxPool2d(3, 2, 1)], 64
    for stage, blocks in enumerate((3, 4, 6, 3)):
        for b in range(blocks):
            layers.append(Bottleneck(cin, 64 << stage, 2 if stage > 0 and b == 0 else 1))
            cin = 4 * (64 << stage)
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000)]
    return nn.Sequential(*layers)


def resnet50_rows(torch, batch, reps, results):
    """ms per training step of ResNet-50 at `batch` random 224x224 images, SGD (momentum 0.9,
    weight decay 5e-4): float32 with TF32 off (as weft's float32), and channels-last under
    autocast to bfloat16 (float32 parameters)."""
    key = f"resnet50 train step b{batch}"
    for name, autocast in (("float32", False), ("bfloat16", True)):
        torch.backends.cudnn.allow_tf32 = False
        torch.manual_seed(0)
        model = resnet50(torch).cuda()
        x = torch.randn(batch, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (batch,), device="cuda")
        if autocast:
            model, x = model.to(memory_format=torch.channels_last), \
                x.contiguous(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()

        for _ in range(3):
            step()
        results[f"{key} {name}"] = time_ms(torch, reps, 5, step)
        del model, opt, x, y
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default
    torch.cuda.empty_cache()


def gpt2_rows(torch, batch, reps, results):
    """ms per training step of GPT-2 124M (nanoGPT's model: 12 layers, 12 heads, width 768,
    context 1024, vocabulary 50304, tied embeddings) at `batch` windows of random tokens, as
    gpu_bench's weft rows: parameters and activations in bfloat16 (and float32 parameters under
    autocast, the "bfloat16-mixed" row; under float16 autocast with a GradScaler, unscaling before
    the clipping, the "float16-mixed" row), cross-entropy in float32, AdamW
    (betas 0.9, 0.95, weight decay 0.1 on the matrices; fused where this PyTorch has it),
    gradients clipped to norm 1; eager, then torch.compile."""
    import torch.nn as nn
    import torch.nn.functional as F
    vocab, context, layers, heads, width = 50304, 1024, 12, 12, 768

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x):
            b, t, w = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(w, dim=-1)
            q, k, v = (z.view(b, t, heads, -1).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, w))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(width)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            logits = self.ln_f(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.float().view(-1, vocab), targets.view(-1))

    idx = torch.randint(0, vocab, (batch, context), device="cuda")
    targets = torch.randint(0, vocab, (batch, context), device="cuda")
    # "bfloat16": bfloat16 parameters; "...-mixed": float32 parameters under autocast.
    for name, mixed, low in (("bfloat16", False, torch.bfloat16),
                             ("bfloat16-mixed", True, torch.bfloat16),
                             ("float16-mixed", True, torch.float16)):
        model = Gpt().cuda() if mixed else Gpt().cuda().to(torch.bfloat16)
        scaler = torch.amp.GradScaler("cuda", enabled=low == torch.float16)
        params = list(model.parameters())
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        try:
            opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
        except (RuntimeError, TypeError):
            opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
        key = f"gpt2 124M train step b{batch} {name}"

        def step(m):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=low, enabled=mixed):
                loss = m(idx, targets)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            scaler.step(opt)
            scaler.update()

        for _ in range(3):
            step(model)
        results[key] = time_ms(torch, reps, 5, lambda: step(model))
        try:
            compiled = torch.compile(model)
            for _ in range(3):
                step(compiled)
            results[key + " compile"] = time_ms(torch, reps, 5, lambda: step(compiled))
        except Exception as e:  # noqa: BLE001 (no compiler toolchain there, say)
            results[key + " compile error"] = str(e)[:500]
        del model, opt, params, groups, scaler


def chain(torch, x):
    return torch.sigmoid(torch.relu(x * 1.5 + 0.25) * 0.75 - 0.5) * 2.0 + -1.0


def chain_rows(torch, reps, results):
    """The chain on 64M float32: forward (no autograd) and backward (dx for dy, the graph kept)."""
    n = 64 << 20
    x = torch.rand(n, device="cuda") * 4 - 2
    dy = torch.rand(n, device="cuda") * 4 - 2
    xg = x.clone().requires_grad_(True)
    variants = [("eager", lambda t: chain(torch, t))]
    try:
        variants.append(("compile", torch.compile(lambda t: chain(torch, t))))
    except Exception as e:  # noqa: BLE001
        results["chain compile error"] = str(e)
    for name, fn in variants:
        try:
            with torch.no_grad():
                fn(x)
                results["chain forward ms " + name] = time_ms(torch, reps, 20, lambda: fn(x))
            y = fn(xg)
            torch.autograd.grad(y, xg, dy, retain_graph=True)
            results["chain backward ms " + name] = time_ms(
                torch, reps, 20, lambda: torch.autograd.grad(y, xg, dy, retain_graph=True))
        except Exception as e:  # noqa: BLE001 (torch.compile needs Triton and a C compiler)
            results["chain " + name + " error"] = str(e)[:500]


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    torch = import_torch(need_cuda=True)
    if torch is None:
        return
    results = {}
    parts = set(sys.argv[2:]) or {"mlp", "rnn", "attention", "layernorm", "tiny", "relu", "chain"}
    for a in sys.argv[2:]:
        if a.startswith("gpt2="):
            gpt2_rows(torch, int(a.split("=")[1]), reps, results)
        if a.startswith("resnet50="):
            resnet50_rows(torch, int(a.split("=")[1]), reps, results)
    for name, sizes, batch in NETS if "mlp" in parts else []:
        for dtype, dname in ((torch.float32, "float32"), (torch.bfloat16, "bfloat16")):
            key = f"mlp {name} b{batch} {dname}"
            results[key], graph = mlp_step(torch, sizes, batch, dtype, reps)
            results[key + " trainer, CUDA graph"] = graph
            results[key + " trainer, no graph"] = results[key]
    for mode in ("lstm", "gru") if "rnn" in parts else ():
        for h, precision in ((512, "float32"), (512, "tf32"), (512, "bfloat16"), (128, "tf32")):
            key = f"{mode} T64 N64 I512 H{h} L2 bi fwd+bwd {precision}"
            results[key] = rnn_step(torch, mode, precision, h, reps)
    for dtype, dname in ((torch.bfloat16, "bfloat16"), (torch.float32, "float32")) \
            if "attention" in parts else ():
        key = f"attention B8 H12 T1024 D64 causal fwd+bwd {dname}"
        try:
            results[key] = attention_step(torch, dtype, reps)
        except Exception as e:  # noqa: BLE001 (an old PyTorch without the function)
            results[key + " error"] = str(e)[:500]
    if "layernorm" in parts:
        results["layernorm 8192x768 fwd+bwd bfloat16"] = layernorm_step(torch, reps)
    if "tiny" in parts:
        a = torch.zeros(16, device="cuda")
        b = torch.ones(16, device="cuda")
        for _ in range(1000):
            a.add_(b)
        results["tiny op us"] = 1e3 * time_ms(torch, reps, 10000, lambda: a.add_(b))
    if "relu" in parts:
        n = 64 << 20
        x = torch.full((n,), -0.5, device="cuda")
        y = torch.empty(n, device="cuda")
        moved = 2.0 * n * 4
        results["relu GB/s"] = moved / time_ms(torch, reps, 20,
                                               lambda: torch.clamp(x, min=0, out=y)) / 1e6
        results["copy GB/s"] = moved / time_ms(torch, reps, 20, lambda: y.copy_(x)) / 1e6
        del x, y
    if "chain" in parts:
        chain_rows(torch, reps, results)
    print(json.dumps({"available": True, "version": torch.__version__,
                      "device": torch.cuda.get_device_name(0), "results": results}))


if __name__ == "__main__":
    main()
