#!/usr/bin/env python3
"""The PyTorch side of bench/gpt_bench: train_gpt's GPT (tests/gpt_torch_cases.py's model, the
oracle of ops_gpt_test, imported and sized here) and causal attention alone, at the same thread
count. Attention is matmul-softmax-matmul with a causal mask (1.13 has no
scaled_dot_product_attention).

Usage: torch_gpt_peer.py THREADS ROW ARGS..., one row per process so that each row's peak memory
is its own (ru_maxrss only grows):
  train     VOCAB CONTEXT LAYERS HEADS WIDTH BATCH STEPS ROUNDS   AdamW steps as train_gpt's
  generate  VOCAB CONTEXT LAYERS HEADS WIDTH CHARS ROUNDS         a cached step per character
  attention B H T D STEPS ROUNDS                                  forward and backward
Prints one JSON object: {"available": bool, "version", "threads", "ms": float, "peak_bytes": int}
with ms the median over ROUNDS rounds of STEPS calls (per step, per character, per forward and
backward) and peak_bytes the growth of peak resident memory while the row ran.
"""
import json
import math
import os
import sys

from peer_common import hello, import_torch, peak_growth, rounds_ms, start_peak

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def gpt_module(vocab, context, layers, heads, width):
    """tests/gpt_torch_cases.py, its model's sizes (module constants) set to these."""
    import gpt_torch_cases as cases
    cases.VOCAB, cases.CONTEXT, cases.LAYERS = vocab, context, layers
    cases.HEADS, cases.WIDTH = heads, width
    return cases


def cached_logits(cases, model, tokens, start, cache):
    """The logits (B, L, VOCAB) of tokens (B, L) at positions start, ..., start + L - 1: each
    block's keys and values of the positions before start read from cache[i] (past keys and
    values, (B, H, start, D) each), those of the new positions appended to it."""
    import torch
    x = model.wte(tokens) + model.wpe(torch.arange(start, start + tokens.shape[1]))
    for i, block in enumerate(model.blocks):
        h = block.ln1(x)
        b, t, w = h.shape
        q, k, v = block.qkv(h).split(w, dim=-1)
        q, k, v = (z.reshape(b, t, cases.HEADS, -1).transpose(1, 2) for z in (q, k, v))
        if start > 0:
            k, v = torch.cat([cache[i][0], k], dim=2), torch.cat([cache[i][1], v], dim=2)
        cache[i] = (k, v)
        s = q @ k.transpose(-1, -2) / math.sqrt(w // cases.HEADS)
        if t > 1:  # query j sees keys up to start + j
            s = s.masked_fill(torch.ones(t, start + t, dtype=torch.bool).triu(start + 1),
                              float("-inf"))
        y = torch.softmax(s, dim=-1) @ v
        x = x + block.attn_proj(y.transpose(1, 2).reshape(b, t, w))
        x = x + block.mlp_proj(torch.nn.functional.gelu(block.fc(block.ln2(x)), approximate="tanh"))
    return model.ln_f(x) @ model.wte.weight.t()


def train(torch, sizes, batch, steps, rounds, mixed):
    """ms per step: mean loss, backward, gradients clipped to norm 1, AdamW (betas 0.9, 0.95,
    weight decay 0.1 on the matrices only), as train_gpt; with `mixed`, the forward under
    torch.autocast("cpu", dtype=torch.bfloat16)."""
    before = start_peak()
    cases = gpt_module(*sizes)
    model = cases.Gpt()
    params = list(model.weft_arrays().values())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=5e-3, betas=(0.9, 0.95), eps=1e-8)
    vocab, context = sizes[0], sizes[1]
    tokens = torch.randint(0, vocab, (batch, context))
    label = torch.randint(0, vocab, (batch, context))

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(mixed)):
            loss = model(tokens, label).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    ms = rounds_ms(step, steps, rounds, warmup=2)
    return ms, peak_growth(before)


def generate(torch, sizes, chars, rounds):
    """ms per character: the likeliest next id from a cached step per character, as weft's
    GptGenerator: the prompt in one step, then one position a step; when the window is full, its
    last CONTEXT // 2 ids again from position 0."""
    before = start_peak()
    cases = gpt_module(*sizes)
    model = cases.Gpt().eval()
    context = sizes[1]
    keep = max(1, context // 2)

    def run():
        ids, cache = [1, 2, 3, 4], [None] * len(model.blocks)
        out = cached_logits(cases, model, torch.tensor([ids]), 0, cache)
        position = len(ids)
        for n in range(chars):
            ids.append(int(out[0, -1].argmax()))
            if n + 1 == chars:
                break
            if position == context:
                out = cached_logits(cases, model, torch.tensor([ids[-keep:]]), 0, cache)
                position = keep
            else:
                out = cached_logits(cases, model, torch.tensor([ids[-1:]]), position, cache)
                position += 1

    with torch.no_grad():
        ms = rounds_ms(run, 1, rounds, warmup=1) / chars
    return ms, peak_growth(before)


def attention(torch, b, h, t, d, steps, rounds):
    """ms per forward and backward of causal attention on q, k, v (B, H, T, D)."""
    before = start_peak()
    q, k, v = (torch.randn(b, h, t, d, requires_grad=True) for _ in range(3))
    mask = torch.ones(t, t, dtype=torch.bool).triu(1)

    def step():
        s = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(mask, float("-inf"))
        y = torch.softmax(s, dim=-1) @ v
        y.backward(torch.ones_like(y))

    ms = rounds_ms(step, steps, rounds, warmup=2)
    return ms, peak_growth(before)


def main():
    threads, row, args = int(sys.argv[1]), sys.argv[2], [int(a) for a in sys.argv[3:]]
    torch = import_torch(threads)
    if torch is None:
        return
    torch.manual_seed(0)
    if row == "train":
        ms, peak = train(torch, args[:5], *args[5:])
    elif row == "generate":
        ms, peak = generate(torch, args[:5], *args[5:])
    else:
        ms, peak = attention(torch, *args)
    print(json.dumps(dict(hello(torch), ms=ms, peak_bytes=peak)))


if __name__ == "__main__":
    main()
