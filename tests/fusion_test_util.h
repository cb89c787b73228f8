// Graphs the pointwise fusion tests share (tests/ops_fusion_test.cc, gpu_fusion_test.cc,
// cuda_fusion_codegen_test.cc): symbol shorthands, the benchmark's 8-op chain and the seed's
// XLNet pattern, and the fused groups of a graph.
//
//   Symbol y = Chain(Var("x"));                       // sigmoid(relu(x * 1.5 + 0.25) * 0.75 - 0.5)
//   * 2 - 1 for (auto& g : FusedGroupsOf(FusePointwise(typed))) ...
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "graph/graph.h"
#include "graph/symbol.h"
#include "ops/fusion/fused_group.h"

namespace weft::testing {

Symbol Var(const std::string& name);
Symbol Op1(const std::string& op, const Symbol& x, AttrMap attrs = {});
Symbol Op2(const std::string& op, const Symbol& a, const Symbol& b);
Symbol Scalar(const std::string& op, const Symbol& x, double s);  // a *_scalar op

// sigmoid(relu(x * a + 0.25) * 0.75 - 0.5) * 2 - 1, with a = first_scalar: the benchmark's chain.
Symbol Chain(const Symbol& x, double first_scalar = 1.5);

// The seed (apache/mxnet#19316): relu(x) reshaped 12 times to (16, 8, 4), each reshape followed
// by 12 expand_dims: with CSE off, one group of 144 outputs (x: 512 elements).
Symbol XLNetPattern(const Symbol& x);

// Transformer blocks whose attention mask and position terms are built as XLNet's are (the seed's
// model): long chains of expand_dims and reshape from small data inputs feeding pointwise ops of
// many inputs. The mask's terms are computed once for the model, and every block (pre-LayerNorm,
// as GPT-2) expands and adds them up for its own Attention, as XLNet's layers do, so one group
// holds the terms and every layer's chains (an output per layer and term: the seed's group):
//   mask (B, H, T, T) = padding (B, 1, 1, T) + causal (1, 1, T, T) + other segment (B, 1, T, T)
//                       + a per-head slope times -|i - j| (1, H, T, T) (ALiBi's relative bias),
//   from `pad` (B, T; 1 a token, 0 padding), `segment` (B, T; 0 or 1), `positions` (T,) and
//   `slopes` (H,), the sum through Attention's additive mask (-1e4 masks a key, as XLNet's);
//   q + r_w_bias + r_s_bias (each (H, D) expanded to (1, H, 1, D)): XLNet's content and segment
//   biases; the MLP FullyConnected without bias, + bias, gelu (tanh or erf), FullyConnected; each
//   branch through Dropout and added back (the residual).
// Data inputs: data (B, T, W), pad, segment, positions, slopes, and probe (B, T, W): the loss is
// sum(blocks(data) * probe), so every gradient is a real one. Parameters: b<i>_ln1_{gamma,beta},
// b<i>_qkv_{weight,bias}, b<i>_r_w_bias, b<i>_r_s_bias, b<i>_proj_{weight,bias}, b<i>_ln2_*,
// b<i>_fc_weight, b<i>_fc_bias, b<i>_out_{weight,bias}.
struct XLNetBlockConfig {
  int batch = 2, seq = 8, heads = 2, head_dim = 8, layers = 2;
  double dropout = 0.1;
  bool gelu_tanh = true;  // gelu's approximate = "tanh" (GPT-2's), else its erf form
  int width() const { return heads * head_dim; }
};
Symbol XLNetBlocks(const XLNetBlockConfig& c);
// Every argument's shape (data inputs and parameters).
std::map<std::string, Shape> XLNetBlockShapes(const XLNetBlockConfig& c);
// The data inputs (no gradient): pad, segment, positions, slopes, probe, and data itself.
bool IsXLNetBlockData(const std::string& name);
// Values for an argument: positions 0..T-1; pad 1 but the last `b` tokens of row b; segment 0 then
// 1 from the middle; slopes 2^-(h+1); the others uniform in [-1, 1) (gammas about 1) from `seed`.
std::vector<float> XLNetBlockValues(const std::string& name, const Shape& shape, uint64_t seed);

// One training step of XLNetBlocks(c) bound on `device` with CSE off (as the seed had it) and
// fusion on or off, Dropout's masks from one seed: the loss, then every gradient (of data and of
// each parameter, by name).
std::vector<std::vector<float>> RunXLNetBlocks(const XLNetBlockConfig& c, Device device,
                                               bool fusion);

// The group of every _fused_pointwise node of `g`, in node order.
std::vector<std::shared_ptr<const FusedGroup>> FusedGroupsOf(const Graph& g);

}  // namespace weft::testing
