// The inference pass that moves a transpose across the FullyConnected beside it, so that it joins
// the movement chain on the layer's other side (passes/commute_moves.h): nn.MultiheadAttention
// with batch_first, as PyTorch exports it, loses the copies of its input's and its result's
// transposes; transposes that would join no chain, that move the last axis, or that meet a layer
// over flattened rows stay; training binds keep theirs. Outputs equal the unmoved graph's.
#include "passes/commute_moves.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "passes/pipeline.h"
#include "tests/pass_test_util.h"
#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::BindCpu;
using testing::CountOps;
using testing::Reshape;
using testing::Transpose;

constexpr int64_t kB = 3, kT = 5, kH = 2, kD = 4, kE = kH * kD;

Symbol Dense(const Symbol& x, const std::string& name, int64_t hidden, bool flatten) {
  return Symbol::Op(
      "FullyConnected", {x, Symbol::Variable(name + "_weight"), Symbol::Variable(name + "_bias")},
      {{"num_hidden", std::to_string(hidden)}, {"flatten", flatten ? "true" : "false"}}, name);
}

// PyTorch 1.13's export of nn.MultiheadAttention(batch_first=True) around its products, cut
// short: x (B, T, E) transposed to (T, B, E), the packed projection, q and v as (B*H, T, D) heads;
// their product per head back to (T*B, E) for the output projection, which is seen as (T, B, E)
// and transposed back to (B, T, E).
Symbol BatchFirstAttention() {
  const Symbol x = Symbol::Variable("data");
  const Symbol packed = Dense(Transpose(x, {1, 0, 2}), "in_proj", 3 * kE, false);
  auto head = [&](int64_t part) {
    const Symbol p = testing::Slice(packed, 2, part * kE, (part + 1) * kE);
    return Transpose(Reshape(p, {kT, kB * kH, kD}), {1, 0, 2});
  };
  const Symbol heads = Symbol::Op("mul", {head(0), head(2)});  // (B*H, T, D)
  const Symbol rows = Reshape(Transpose(heads, {1, 0, 2}), {kT * kB, kE});
  const Symbol out = Dense(rows, "out_proj", kE, true);
  return Symbol::Op("add", {Transpose(Reshape(out, {kT, kB, kE}), {1, 0, 2}), x});
}

void ExpectSameOutputs(const Symbol& s, const Shape& data) {
  testing::ExpectPassKeepsOutputs(s, data, "WEFT_COMMUTE_MOVES");
}

// Both transposes move: the input's after the projection, where it joins the heads' chains, the
// result's before the output projection, where it joins the chain that gathers the heads; two
// copies fewer than with the pass off.
TEST(CommuteMoves, BatchFirstAttentionLosesTheCopiesOfItsTwoTransposes) {
  const Symbol net = BatchFirstAttention();
  const Shape data{kB, kT, kE};
  const BindResult on = BindCpu(net, data);
  EXPECT_EQ(on.commuted_moves, 2);
  BindResult off;
  {
    testing::ScopedEnv env("WEFT_COMMUTE_MOVES", "0");
    off = BindCpu(net, data);
  }
  const auto copies = [](const Graph& g) {
    return CountOps(g, "_strided_copy") + CountOps(g, "transpose");
  };
  EXPECT_EQ(copies(on.graph) + 2, copies(off.graph));
  ExpectSameOutputs(net, data);
}

// Each stays: a transpose whose layer's output a relu reads (it would join no chain), one that
// moves the last axis, one before a layer that flattens its rows, and a chain after a layer
// that only reshapes (no copy to save).
TEST(CommuteMoves, TransposesThatWouldJoinNoChainStay) {
  const Symbol x = Symbol::Variable("data");
  const std::vector<Symbol> nets = {
      Symbol::Op("relu", {Dense(Transpose(x, {1, 0, 2}), "fc", 6, false)}),
      Reshape(Dense(Transpose(x, {0, 2, 1}), "fc", 6, false), {3, 5, 2, 3}),
      Transpose(Reshape(Dense(Transpose(x, {1, 0, 2}), "fc", 6, true), {5, 2, 3}), {1, 0, 2}),
      Reshape(Dense(testing::Slice(x, 0, 0, 2), "fc", 6, false), {2, 5, 2, 3}),
  };
  for (size_t i = 0; i < nets.size(); ++i) {
    SCOPED_TRACE("net " + std::to_string(i));
    EXPECT_EQ(BindCpu(nets[i], Shape{3, 5, 5}).commuted_moves, 0);
    ExpectSameOutputs(nets[i], Shape{3, 5, 5});
  }
}

TEST(CommuteMoves, TrainingBindsKeepTheirTransposes) {
  const BindResult bound = BindCpu(BatchFirstAttention(), Shape{kB, kT, kE}, {"in_proj_weight"});
  EXPECT_EQ(bound.commuted_moves, 0);
}

}  // namespace
}  // namespace weft
