#!/usr/bin/env python3
"""train_gpt's run in PyTorch, for the validation loss to match (README.md, train_gpt).

The same model (tests/gpt_torch_cases.py's, the oracle of ops_gpt_test, sized by the flags, with
train_gpt's dropout), the same text read and split as train_gpt reads it (a file, or a folder's
regular files in name order without symbolic links and .dat files; the first 90% trains), the
same batches (train_gpt's random windows: std::mt19937_64 seeded with --seed and GCC's
uniform_int_distribution, written out below), the same validation windows, and the same
hyperparameters: GPT-2's initialization as examples::InitializeGpt (normal 0.02, the residual
projections 0.02 / sqrt(2 layers), biases 0, LayerNorm scales 1), AdamW with betas 0.9, 0.95,
eps 1e-8 and weight decay on the matrices only, a linear warm-up then a cosine rate down to lr / 10
over the other steps, gradients clipped to a global norm, the mean cross-entropy per character.
What differs: the random numbers of the initialization and of dropout.

Prints the validation loss after each epoch (nats and bits per character), as train_gpt does.

    /usr/bin/python3 examples/train_gpt_torch.py [--data=/usr/share/games/fortunes] [--epochs=5]
        [--steps=100] [--threads=2]     # the other flags and defaults are train_gpt's
"""
import argparse
import math
import os
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import gpt_torch_cases as model_def  # noqa: E402  (tests/ is not a package)

MASK64 = (1 << 64) - 1


class Mt19937_64:
    """std::mt19937_64."""

    def __init__(self, seed):
        self.mt = [seed & MASK64]
        for i in range(1, 312):
            prev = self.mt[-1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & MASK64)
        self.index = 312

    def _twist(self):
        mt = self.mt
        for i in range(312):
            y = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % 312] & 0x7FFFFFFF)
            mt[i] = mt[(i + 156) % 312] ^ (y >> 1) ^ (0xB5026F5AA96619E9 if y & 1 else 0)
        self.index = 0

    def __call__(self):
        if self.index >= 312:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        return y ^ (y >> 43)


def uniform_int(rng, high):
    """std::uniform_int_distribution<int64_t>(0, high)(rng) as GCC 12's libstdc++ draws it from a
    64-bit generator: Lemire's multiply-and-shift with rejection."""
    span = high + 1
    product = rng() * span
    if product & MASK64 < span:
        threshold = (-span & MASK64) % span
        while product & MASK64 < threshold:
            product = rng() * span
    return product >> 64


def read_text(path):
    """examples::ReadTextFiles."""
    if not os.path.isdir(path):
        with open(path, "rb") as f:
            return f.read()
    names = sorted(n for n in os.listdir(path) if not os.path.islink(os.path.join(path, n)) and
                   os.path.isfile(os.path.join(path, n)) and not n.endswith(".dat"))
    text = b""
    for n in names:
        with open(os.path.join(path, n), "rb") as f:
            text += f.read()
    return text


class Windows:
    """examples::Windows: windows of context + 1 ids, at random (Fill) or even (FillEven) offsets."""

    def __init__(self, ids, context, seed):
        self.ids, self.context, self.rng = ids, context, Mt19937_64(seed)

    def batch(self, offsets):
        rows = torch.stack([self.ids[o:o + self.context + 1] for o in offsets])
        return rows[:, :-1], rows[:, 1:]

    def fill(self, batch):
        high = len(self.ids) - self.context - 1
        return self.batch([uniform_int(self.rng, high) for _ in range(batch)])

    def fill_even(self, first, batch, count):
        span = len(self.ids) - self.context - 1
        return self.batch([(first + r) % count * span // count for r in range(batch)])


def make_model(a, vocab):
    model_def.VOCAB, model_def.CONTEXT, model_def.LAYERS = vocab, a.context, a.layers
    model_def.HEADS, model_def.WIDTH, model_def.DROPOUT = a.heads, a.width, a.dropout
    model = model_def.Gpt()
    with torch.no_grad():
        for name, p in model.weft_arrays().items():  # examples::InitializeGpt
            if name.endswith("_weight"):
                sigma = 0.02 / (math.sqrt(2 * max(a.layers, 1)) if name.endswith("_proj_weight")
                                else 1)
                p.normal_(0, sigma)
            elif name.endswith("_gamma"):
                p.fill_(1)
            else:
                p.zero_()
    return model


def rate(a, t):
    """weft::LrSchedule{Cosine{total - warmup, lr / 10}, warmup}'s rate of step t (1-based)."""
    if t <= a.warmup:
        return a.lr * t / a.warmup
    steps = max(a.steps * a.epochs - a.warmup, 1)
    u = min(t - a.warmup, steps)
    final = a.lr / 10
    return final + (a.lr - final) * (1 + math.cos(math.pi * u / steps)) / 2


def validation_loss(model, val, a):
    model.eval()
    with torch.no_grad():
        total = sum(model(*val.fill_even(b * a.batch_size, a.batch_size,
                                         a.val_batches * a.batch_size)).mean().item()
                    for b in range(a.val_batches))
    model.train()
    return total / a.val_batches


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in [("data", "/usr/share/games/fortunes"), ("epochs", 5), ("steps", 100),
                          ("batch_size", 32), ("lr", 5e-3), ("wd", 0.1), ("warmup", 50),
                          ("clip", 1.0), ("layers", 4), ("heads", 4), ("width", 128),
                          ("context", 64), ("dropout", 0.0), ("val_batches", 8), ("seed", 1),
                          ("threads", 2)]:
        p.add_argument("--" + name, type=type(default), default=default)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    text = read_text(a.data)
    vocabulary = sorted(set(text))
    id_of = {b: i for i, b in enumerate(vocabulary)}
    ids = torch.tensor([id_of[b] for b in text])
    cut = len(text) * 9 // 10
    train, val = Windows(ids[:cut], a.context, a.seed), Windows(ids[cut:], a.context, a.seed)
    model = make_model(a, len(vocabulary))
    params = model.weft_arrays()
    opt = torch.optim.AdamW(
        [{"params": [q for q in params.values() if q.dim() >= 2], "weight_decay": a.wd},
         {"params": [q for q in params.values() if q.dim() < 2], "weight_decay": 0.0}],
        lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    print("%d training and %d validation characters, vocabulary %d; %d layers, %d heads, width "
          "%d, context %d; PyTorch %s, %d threads, lr %g, batch %d" %
          (cut, len(text) - cut, len(vocabulary), a.layers, a.heads, a.width, a.context,
           torch.__version__, a.threads, a.lr, a.batch_size), flush=True)
    t = 0
    for epoch in range(1, a.epochs + 1):
        start, total = time.time(), 0.0
        for _ in range(a.steps):
            t += 1
            for group in opt.param_groups:
                group["lr"] = rate(a, t)
            opt.zero_grad()
            loss = model(*train.fill(a.batch_size)).mean()
            loss.backward()
            if a.clip > 0:
                nn.utils.clip_grad_norm_(list(params.values()), a.clip)
            opt.step()
            total += loss.item()
        v = validation_loss(model, val, a)
        print("epoch %d/%d  %.0f tokens/s  loss %.4f  val loss %.4f nats  %.3f bits/char" %
              (epoch, a.epochs, a.steps * a.batch_size * a.context / (time.time() - start),
               total / a.steps, v, v / math.log(2)), flush=True)


if __name__ == "__main__":
    main()
