#include "examples/common/gpt.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>

namespace examples {
namespace {

using weft::Symbol;

std::string Str(int v) { return std::to_string(v); }

// x (B, T, K) -> (B, T, n): FullyConnected on the last axis, named <name> (<name>_weight (n, K),
// <name>_bias (n,)).
Symbol Dense(const Symbol& x, int n, const std::string& name) {
  return Symbol::Op("FullyConnected", {x}, {{"num_hidden", Str(n)}, {"flatten", "false"}}, name);
}

// LayerNorm with its gamma and beta (name_gamma, name_beta). Its statistics and affine terms are
// float32 for bfloat16 data: bfloat16 parameters are cast to float32 on the way in (their
// gradients cast back), so a bfloat16 trainer holds them like every other parameter.
Symbol Norm(const Symbol& x, const GptConfig& c, const std::string& name) {
  if (c.dtype != weft::DType::kBFloat16) return Symbol::Op("LayerNorm", {x}, {}, name);
  std::vector<Symbol> affine;
  for (const char* part : {"_gamma", "_beta"}) {
    affine.push_back(Symbol::Op("Cast", {Symbol::Variable(name + part)}, {{"dtype", "float32"}},
                                name + part + "_f32"));
  }
  return Symbol::Op("LayerNorm", {x, affine[0], affine[1]}, {}, name);
}

// Dropout in training; nothing at all when p is 0 (the graph stays deterministic).
Symbol Drop(const Symbol& x, const GptConfig& c, const std::string& name) {
  if (c.dropout == 0) return x;
  return Symbol::Op("Dropout", {x}, {{"p", std::to_string(c.dropout)}}, name);
}

// (B, T, W) -> (B, H, T, D), W = H * D.
Symbol SplitHeads(const Symbol& x, const GptConfig& c, const std::string& name) {
  const Symbol r = Symbol::Op("reshape", {x}, {{"shape", "(0, 0, " + Str(c.heads) + ", -1)"}},
                              name + "_reshape");
  return Symbol::Op("transpose", {r}, {{"axes", "(0, 2, 1, 3)"}}, name + "_heads");
}

// The step graph's inputs beyond the full model's (MakeGptStep): where the chunk starts (the
// first of `positions`, (1,)) and the additive mask (L, context) over the cached keys.
struct CacheInputs {
  Symbol start;
  Symbol mask;
};

// Keys and values of x's T positions, written into <name>_{k,v}_cache (B, H, context, D) from
// `in.start` on; returns the caches, which then hold every position up to the last of x's.
std::pair<Symbol, Symbol> Cached(const Symbol& k, const Symbol& v, const CacheInputs& in,
                                 const std::string& name) {
  const auto write = [&](const Symbol& x, const std::string& cache) {
    return Symbol::Op("write_at", {Symbol::Variable(name + cache), x, in.start}, {{"axis", "2"}},
                      name + cache + "_write");
  };
  return {write(k, "_k_cache"), write(v, "_v_cache")};
}

// Causal self-attention of x (B, T, W): one qkv projection (B, T, 3 W), seen as (B, T, 3, H, D)
// by Attention's packed layout, which reads q, k and v through strides and writes (B, T, H, D): no
// split and no transposes. With `cache`, the step's q, k, v are split into heads (B, H, T, D), k
// and v written into the caches, and Attention reads the cached keys and values under the step's
// mask. The heads are joined again (B, T, W) and projected.
Symbol SelfAttention(const Symbol& x, const GptConfig& c, const CacheInputs* cache,
                     const std::string& name) {
  const Symbol qkv = Dense(x, 3 * c.width, name + "_qkv");
  Symbol joined;
  if (cache == nullptr) {
    const Symbol packed = Symbol::Op(
        "reshape", {qkv}, {{"shape", "(0, 0, 3, " + Str(c.heads) + ", -1)"}}, name + "_packed");
    joined = Symbol::Op("Attention", {packed}, {{"causal", "true"}, {"layout", "bt3hd"}},
                        name + "_sdpa");
  } else {
    const Symbol parts =
        Symbol::Op("split", {qkv}, {{"num_outputs", "3"}, {"axis", "-1"}}, name + "_split");
    const Symbol q = SplitHeads(parts[0], c, name + "_q");
    const auto [k, v] = Cached(SplitHeads(parts[1], c, name + "_k"),
                               SplitHeads(parts[2], c, name + "_v"), *cache, name);
    const Symbol y =
        Symbol::Op("Attention", {q, k, v, cache->mask}, {{"use_mask", "true"}}, name + "_sdpa");
    joined = Symbol::Op("transpose", {y}, {{"axes", "(0, 2, 1, 3)"}}, name + "_join");
  }
  const Symbol merged = Symbol::Op("reshape", {joined}, {{"shape", "(0, 0, -1)"}}, name + "_merge");
  return Dense(merged, c.width, name + "_proj");
}

// x (B, T, W) -> (B, T, 4 W) -> GELU (tanh) -> (B, T, W).
Symbol Mlp(const Symbol& x, const GptConfig& c, const std::string& name) {
  const Symbol h = Dense(x, 4 * c.width, name + "_fc");
  const Symbol a = Symbol::Op("gelu", {h}, {{"approximate", "tanh"}}, name + "_gelu");
  return Dense(a, c.width, name + "_proj");
}

// x + attention(ln1(x)), then + mlp(ln2(x)), each branch through dropout.
Symbol Block(Symbol x, const GptConfig& c, const CacheInputs* cache, const std::string& name) {
  const Symbol a = SelfAttention(Norm(x, c, name + "_ln1"), c, cache, name + "_attn");
  x = Symbol::Op("add", {x, Drop(a, c, name + "_attn_drop")}, {}, name + "_attn_res");
  const Symbol m = Mlp(Norm(x, c, name + "_ln2"), c, name + "_mlp");
  return Symbol::Op("add", {x, Drop(m, c, name + "_mlp_drop")}, {}, name + "_mlp_res");
}

void Check(const GptConfig& c) {
  if (c.vocab < 1 || c.context < 1 || c.layers < 0 || c.heads < 1 || c.width < 1 ||
      c.width % c.heads != 0 || !(c.dropout >= 0 && c.dropout < 1)) {
    WEFT_THROW("GPT: expected vocab, context, heads and width >= 1, layers >= 0, width divisible"
               << " by heads and dropout in [0, 1); found vocab " << c.vocab << ", context "
               << c.context << ", layers " << c.layers << ", heads " << c.heads << ", width "
               << c.width << ", dropout " << c.dropout);
  }
}

// The logits (B * T, vocab) of data (B, T) at `positions` (T,): the whole model, each block's
// attention over the cache with `cache`.
Symbol Logits(const GptConfig& c, const Symbol& positions, const CacheInputs* cache) {
  const Symbol wte = Symbol::Variable("wte_weight");  // read twice: tied
  const Symbol tokens =
      Symbol::Op("Embedding", {Symbol::Variable("data"), wte},
                 {{"input_dim", Str(c.vocab)}, {"output_dim", Str(c.width)}}, "wte");
  const Symbol pos =
      Symbol::Op("Embedding", {positions},
                 {{"input_dim", Str(c.context)}, {"output_dim", Str(c.width)}}, "wpe");
  // (B, T, W) + (T, W), broadcast over the batch.
  Symbol x = Drop(Symbol::Op("add", {tokens, pos}, {}, "embed"), c, "embed_drop");
  for (int i = 0; i < c.layers; ++i) x = Block(x, c, cache, "h" + Str(i));
  x = Norm(x, c, "ln_f");
  const Symbol logits3 = Symbol::Op(
      "FullyConnected", {x, wte},
      {{"num_hidden", Str(c.vocab)}, {"no_bias", "true"}, {"flatten", "false"}}, "lm_head");
  return Symbol::Op("reshape", {logits3}, {{"shape", "(-1, " + Str(c.vocab) + ")"}}, "logits");
}

}  // namespace

Gpt MakeGpt(const GptConfig& c) {
  Check(c);
  const Symbol logits = Logits(c, Symbol::Variable("positions"), nullptr);
  const Symbol label =
      Symbol::Op("reshape", {Symbol::Variable("label")}, {{"shape", "(-1,)"}}, "label_flat");
  return {Symbol::Op("SoftmaxCrossEntropy", {logits, label}, {}, "loss"), logits};
}

Symbol MakeGptStep(GptConfig c) {
  Check(c);
  c.dropout = 0;  // inference only
  const Symbol positions = Symbol::Variable("positions");
  const CacheInputs cache = {
      Symbol::Op("slice", {positions}, {{"begin", "(0,)"}, {"end", "(1,)"}}, "start"),
      Symbol::Variable("mask")};
  return Logits(c, positions, &cache);
}

std::vector<float> Positions(int t, int start) {
  std::vector<float> p(t);
  for (int i = 0; i < t; ++i) p[i] = static_cast<float>(start + i);
  return p;
}

bool InitializeGpt(const GptConfig& config, const std::string& name, const weft::NDArray& array) {
  const auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (!ends_with("_weight")) return false;
  double sigma = 0.02;
  if (ends_with("_proj_weight")) sigma /= std::sqrt(2.0 * std::max(config.layers, 1));
  weft::Normal(sigma).InitWeight(name, array);
  return true;
}

std::map<std::string, weft::Shape> GptDataShapes(int64_t batch, int64_t time) {
  return {{"data", weft::Shape{batch, time}},
          {"label", weft::Shape{batch, time}},
          {"positions", weft::Shape{time}}};
}

}  // namespace examples
