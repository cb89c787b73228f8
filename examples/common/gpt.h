// A GPT (Radford et al. 2019, GPT-2's layout) as weft symbols: token and position embeddings, N
// pre-LayerNorm decoder blocks (causal self-attention with one packed qkv projection, and a
// GELU(tanh) MLP of 4x the width, each added back to the residual stream through dropout), a final
// LayerNorm and an output projection tied to the token embedding. train_gpt trains a character
// model with it; tests/ops_gpt_test checks it against PyTorch (tests/gpt_torch_cases.py).
//
//   examples::Gpt gpt = examples::MakeGpt({.vocab = 96, .context = 64});
//   // data, positions and label bound; gpt.loss's output is the per-token loss (B * T,)
//
// The inputs, all float32 holding integers (weft's Embedding reads indices stored as floats):
//   data       (B, T)  token ids in [0, vocab), T <= context
//   positions  (T,)    the position of each column: 0, 1, ..., T - 1. weft has no arange op, so
//                      the caller fills this data input once (FillPositions); it is what lets the
//                      graph stay free of T-dependent constants.
//   label      (B, T)  the next token of each position (for the loss only)
// Parameters (names end in _weight/_bias/_gamma/_beta for the initializers):
//   wte_weight (vocab, width)  the token embedding and, transposed, the output projection
//   wpe_weight (context, width)
//   h<i>_ln1_{gamma,beta}, h<i>_attn_qkv_{weight,bias} (3 width, width), h<i>_attn_proj_*,
//   h<i>_ln2_*, h<i>_mlp_fc_{weight,bias} (4 width, width), h<i>_mlp_proj_*   for i = 0..layers-1
//   ln_f_{gamma,beta}
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "weft/weft.h"

namespace examples {

struct GptConfig {
  int vocab = 96;
  int context = 64;  // the longest sequence: rows of wpe_weight
  int layers = 2;
  int heads = 4;
  int width = 128;       // divisible by heads
  double dropout = 0.0;  // after the embeddings, on each residual branch (training only)
  // The parameters' dtype. bfloat16: the loss reads the bfloat16 logits and computes in float32
  // (SoftmaxCrossEntropy: its loss is float32, its gradient bfloat16), as PyTorch's autocast
  // computes cross-entropy; data, positions and labels stay float32 (token ids past 256).
  weft::DType dtype = weft::DType::kFloat32;
};

struct Gpt {
  weft::Symbol loss;    // (B * T,) per-token cross-entropy in nats, from data, positions, label
  weft::Symbol logits;  // (B * T, vocab), from data and positions
};

// Throws weft::Error for a config that cannot be built (width not divisible by heads, ...).
Gpt MakeGpt(const GptConfig& config);

// The same model as a step of generation with a key-value cache (examples/common/gpt_generate.h
// runs it): the logits (B * L, vocab) of L new positions, whose keys and values each block writes
// into its cache (write_at) before its attention reads the cache. Inputs, besides the
// parameters (dropout is off):
//   data       (B, L)              token ids at positions start, ..., start + L - 1
//   positions  (L,)                start, ..., start + L - 1 (Positions(L, start))
//   mask       (L, context)        additive: 0 where key j <= start + i, -inf elsewhere (StepMask)
//   h<i>_attn_k_cache, h<i>_attn_v_cache  (B, heads, context, width / heads), i < layers: the
//                                  keys and values of positions < start on entry, updated in
//                                  place with those of the L new ones
// With the caches holding what earlier steps wrote, its logits equal MakeGpt's at the same
// positions (tests/gpt_generate_test).
weft::Symbol MakeGptStep(GptConfig config);

// The values of the `positions` input for t positions from `start`: start, ..., start + t - 1.
std::vector<float> Positions(int t, int start = 0);

// The initialization GPT-2 uses, for TrainerOptions::initialize: every weight normal with
// standard deviation 0.02, the projections into the residual stream (*_proj_weight) with
// 0.02 / sqrt(2 layers); biases and betas zero, gammas one (returns false for them: the trainer's
// initializer's naming convention fills them).
bool InitializeGpt(const GptConfig& config, const std::string& name, const weft::NDArray& array);

// The data inputs of MakeGpt's loss for `batch` windows of `time` positions: data and label
// (batch, time), positions (time,); what a weft::Trainer of it takes.
std::map<std::string, weft::Shape> GptDataShapes(int64_t batch, int64_t time);

}  // namespace examples
