#!/usr/bin/env python3
"""Writes tests/gpt_torch_cases.h: a 2-layer GPT built as examples/common/gpt.h builds it (token and
position embeddings, pre-LayerNorm blocks of causal self-attention with one packed qkv projection
and a tanh-GELU MLP of 4x the width, residuals, a final LayerNorm, the output projection tied to
the token embedding; dropout 0), in PyTorch with the same weights, as the oracle of ops_gpt_test:

  grad:  every parameter by weft's name, a batch of tokens (B, T) with their next tokens, the
         per-token cross-entropy (B * T,) and the gradient of its sum for every parameter, in
         float64 from float32 values.
  steps: STEPS training steps as train_gpt takes them (the mean loss over the tokens, gradients
         clipped to global norm CLIP, torch.optim.AdamW with weight decay on the matrices only,
         a linear warm-up then a cosine rate), each on its own batch: the mean loss of each step
         and every parameter after the last one, in float64.

Attention is written as matmul-softmax-matmul with a causal mask (1.13 has no
scaled_dot_product_attention).

    /usr/bin/python3 tests/gpt_torch_cases.py > tests/gpt_torch_cases.h &&
        clang-format -i tests/gpt_torch_cases.h   # Debian's PyTorch 1.13
"""
import math

import torch
from torch import nn
from torch.nn import functional as F

from torch_fixture import f32, values

VOCAB, CONTEXT, LAYERS, HEADS, WIDTH = 11, 8, 2, 2, 8
DROPOUT = 0.0  # in training, after the embeddings and on each residual branch (train_gpt's)
BATCH, T = 2, 7  # T < CONTEXT: the last position's embedding row gets no gradient
STEPS, LR, BETAS, EPS, WD, CLIP = 10, 3e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
WARMUP = 3  # then a cosine from LR to 0 over STEPS - WARMUP steps (weft::LrSchedule)


def rate(t):
    """The rate of step t (1-based), as weft::LrSchedule{Cosine{STEPS - WARMUP}, WARMUP}."""
    if t <= WARMUP:
        return LR * t / WARMUP
    u, steps = t - WARMUP, STEPS - WARMUP
    return LR * (1 + math.cos(math.pi * min(u, steps) / steps)) / 2


def drop(x, training):
    """Dropout with probability DROPOUT in training; x itself when it is 0 (no random draws)."""
    return F.dropout(x, DROPOUT, training) if DROPOUT > 0 else x


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.attn_proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.fc, self.mlp_proj = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def attention(self, x):
        b, t, w = x.shape
        q, k, v = self.qkv(x).split(w, dim=-1)
        q, k, v = (z.reshape(b, t, HEADS, -1).transpose(1, 2) for z in (q, k, v))
        s = q @ k.transpose(-1, -2) / math.sqrt(w // HEADS)
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        y = F.softmax(s, dim=-1) @ v
        return self.attn_proj(y.transpose(1, 2).reshape(b, t, w))

    def forward(self, x):
        x = x + drop(self.attention(self.ln1(x)), self.training)
        return x + drop(self.mlp_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh")),
                        self.training)

    def weft_arrays(self, n):
        return {n + "_ln1_gamma": self.ln1.weight, n + "_ln1_beta": self.ln1.bias,
                n + "_attn_qkv_weight": self.qkv.weight, n + "_attn_qkv_bias": self.qkv.bias,
                n + "_attn_proj_weight": self.attn_proj.weight,
                n + "_attn_proj_bias": self.attn_proj.bias,
                n + "_ln2_gamma": self.ln2.weight, n + "_ln2_beta": self.ln2.bias,
                n + "_mlp_fc_weight": self.fc.weight, n + "_mlp_fc_bias": self.fc.bias,
                n + "_mlp_proj_weight": self.mlp_proj.weight,
                n + "_mlp_proj_bias": self.mlp_proj.bias}


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, WIDTH), nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(WIDTH)

    def logits(self, tokens):
        x = drop(self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1])), self.training)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()  # tied

    def forward(self, tokens, label):
        return F.cross_entropy(self.logits(tokens).reshape(-1, VOCAB), label.reshape(-1),
                               reduction="none")

    def weft_arrays(self):
        out = {"wte_weight": self.wte.weight, "wpe_weight": self.wpe.weight,
               "ln_f_gamma": self.ln_f.weight, "ln_f_beta": self.ln_f.bias}
        for i, block in enumerate(self.blocks):
            out.update(block.weft_arrays("h%d" % i))
        return dict(sorted(out.items()))


def randomize(model, gen):
    with torch.no_grad():
        for name, p in model.weft_arrays().items():
            if name.endswith("_gamma"):
                p.copy_(1 + f32(p.shape, gen, 0.2))
            elif name.endswith("_weight"):
                p.copy_(f32(p.shape, gen, 0.3))
            else:
                p.copy_(f32(p.shape, gen, 0.1))


def batch(gen):
    tokens = torch.randint(0, VOCAB, (BATCH, T), generator=gen)
    return tokens, torch.randint(0, VOCAB, (BATCH, T), generator=gen)


def train(model, gen):
    """STEPS steps as train_gpt takes them; returns the batches and the mean loss of each step."""
    params = model.weft_arrays()
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    batches, losses = [], []
    for t in range(1, STEPS + 1):
        for group in opt.param_groups:
            group["lr"] = rate(t)
        tokens, label = batch(gen)
        opt.zero_grad()
        loss = model(tokens, label).mean()
        loss.backward()
        nn.utils.clip_grad_norm_(list(params.values()), CLIP)
        opt.step()
        batches.append((tokens, label))
        losses.append(loss.detach())
    return batches, torch.stack(losses)


def emit(key, t):
    print('    {"%s", {%s},\n     {%s}},' % (key, ", ".join(str(s) for s in t.shape), values(t)))


def main():
    gen = torch.Generator().manual_seed(20261206)
    model = Gpt().double()
    randomize(model, gen)
    tokens, label = batch(gen)
    loss = model(tokens, label)
    loss.sum().backward()
    print("// Generated by tests/gpt_torch_cases.py from PyTorch " + torch.__version__ +
          " (float64); do not edit.")
    print("#pragma once\n\n#include <cstdint>\n#include <vector>\n\n"
          "namespace weft::testing::gpt_cases {\n")
    print("constexpr int kVocab = %d, kContext = %d, kLayers = %d, kHeads = %d, kWidth = %d;"
          % (VOCAB, CONTEXT, LAYERS, HEADS, WIDTH))
    print("constexpr int kBatch = %d, kTime = %d, kSteps = %d, kWarmup = %d;"
          % (BATCH, T, STEPS, WARMUP))
    print("constexpr double kLr = %r, kBeta1 = %r, kBeta2 = %r, kEpsilon = %r, kWd = %r, "
          "kClip = %r;\n" % (LR, BETAS[0], BETAS[1], EPS, WD, CLIP))
    print("struct Tensor {\n  const char* name;\n  std::vector<int64_t> shape;\n"
          "  std::vector<double> values;\n};\n")
    print("// Parameters by weft's name, then data, label, loss, grad.<parameter>, step<t>.data,\n"
          "// step<t>.label, step_loss, after.<parameter>.")
    print("inline const std::vector<Tensor>& Tensors() {\n"
          "  static const auto* tensors = new std::vector<Tensor>{")
    params = model.weft_arrays()
    for name, p in params.items():
        emit(name, p)
    emit("data", tokens.double())
    emit("label", label.double())
    emit("loss", loss)
    for name, p in params.items():
        emit("grad." + name, p.grad)
    batches, losses = train(model, gen)
    for t, (tok, lab) in enumerate(batches):
        emit("step%d.data" % t, tok.double())
        emit("step%d.label" % t, lab.double())
    emit("step_loss", losses)
    for name, p in params.items():
        emit("after." + name, p)
    print("  };\n  return *tensors;\n}\n\n}  // namespace weft::testing::gpt_cases")


if __name__ == "__main__":
    main()
