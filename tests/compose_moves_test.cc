// The inference pass that reads a chain of reshapes, transposes and slices as one strided copy of
// the chain's first input (passes/compose_moves.h): the heads of a packed attention projection as
// PyTorch 2 exports them become one copy each; a chain is cut where composing would copy twice,
// where its copy would move columns, or where a slice is no range of a merged axis; a chain that
// ends where it began becomes a reshape; training binds keep their ops. Outputs equal the
// uncomposed graph's bit for bit, in every case and in a few hundred random chains.
#include "passes/compose_moves.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "passes/pipeline.h"
#include "tests/pass_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::CountOps;

using testing::Reshape;
using testing::Slice;
using testing::Transpose;

BindResult BindInference(const Symbol& s, const Shape& data) {
  BindRequest request;
  request.device = Device::Cpu();
  request.shapes = {{"data", data}};
  return RunBindPipeline(s.ToGraph(), request);
}

void ExpectSameOutputs(const Symbol& s, const Shape& data) {
  testing::ExpectPassKeepsOutputs(s, data, "WEFT_COMPOSE_MOVES");
}

// Bound for inference on `data`: `composed` moves composed, the ops counted as `ops` says, and
// the outputs of the pass switched off.
void ExpectComposed(const Symbol& net, const Shape& data, int composed,
                    const std::map<std::string, size_t>& ops) {
  const BindResult bound = BindInference(net, data);
  EXPECT_EQ(bound.composed_moves, composed);
  for (const auto& [op, count] : ops) EXPECT_EQ(CountOps(bound.graph, op), count) << op;
  ExpectSameOutputs(net, data);
}

constexpr int64_t kT = 5, kB = 3, kH = 2, kD = 4, kE = kH * kD;

// PyTorch 2's export of nn.MultiheadAttention's packed projection p (T, B, 3E): unflatten to
// (T, B, 3, E), a new leading axis, that axis swapped with the 3, squeezed; q, k and v gathered
// (slices whose axis goes); each seen as (T, B*H, D), transposed to (B*H, T, D) and split to
// (B, H, T, D) for scaled dot-product attention. Read by an add each.
Symbol PackedHeads() {
  Symbol p = Reshape(Symbol::Variable("data"), {kT, kB, 3, kE});
  p = Symbol::Op("expand_dims", {p}, {{"axis", "0"}});
  p = Reshape(Transpose(p, {3, 1, 2, 0, 4}), {3, kT, kB, kE});
  std::vector<Symbol> heads;
  for (int64_t part = 0; part < 3; ++part) {
    Symbol x = Reshape(Slice(p, 0, part, part + 1), {kT, kB * kH, kD});
    x = Reshape(Transpose(x, {1, 0, 2}), {kB, kH, kT, kD});
    heads.push_back(Symbol::Op("add", {x, x}));
  }
  return Symbol::Group(heads);
}

TEST(ComposeMoves, PackedHeadsAreReadOnceEach) {
  ExpectComposed(PackedHeads(), Shape{kT, kB, 3 * kE}, 3,
                 {{"_strided_copy", 3}, {"transpose", 0}, {"slice", 0}});
}

// A transpose read by an add and by a reshape: the reshape stays a reshape of the copy.
TEST(ComposeMoves, ChainsAreCutWhereComposingWouldCopyTwice) {
  const Symbol t = Transpose(Symbol::Variable("data"), {1, 0, 2});
  ExpectComposed(
      Symbol::Group({Symbol::Op("relu", {t}), Symbol::Op("relu", {Reshape(t, {12, 5})})}),
      Shape{5, 3, 4}, 0, {{"transpose", 1}, {"_strided_copy", 0}});
}

// Columns sliced and transposed: one copy would read columns, so the slice and the tiled
// transpose stay. A slice across a merged axis that is no range of its outer run stays too.
TEST(ComposeMoves, CopiesThatWouldMoveColumnsOrCutRunsAreNotMade) {
  const Symbol columns = Transpose(Slice(Symbol::Variable("data"), 1, 1, 5), {1, 0});
  ExpectComposed(Symbol::Op("relu", {columns}), Shape{6, 7}, 0, {{"slice", 1}, {"transpose", 1}});
  // (2, 3, 4) to (3, 2, 4), merged to (3, 8), sliced at 2..6 of the 8: no range of whole runs of
  // the merge. The reshape reads the input (the transpose goes); the slice stays, reading it.
  const Symbol merged =
      Slice(Reshape(Transpose(Symbol::Variable("data"), {1, 0, 2}), {3, 8}), 1, 2, 6);
  ExpectComposed(Symbol::Op("relu", {merged}), Shape{2, 3, 4}, 1,
                 {{"slice", 1}, {"transpose", 0}, {"_strided_copy", 1}});
}

// A transpose undone, around a reshape: a reshape of the input, no copy at all.
TEST(ComposeMoves, AChainBackToItsInputIsAReshape) {
  Symbol x = Transpose(Symbol::Variable("data"), {2, 0, 1});
  x = Reshape(Reshape(x, {4, 15}), {4, 3, 5});
  ExpectComposed(Symbol::Op("relu", {Transpose(x, {1, 2, 0})}), Shape{3, 5, 4}, 1,
                 {{"transpose", 0}, {"_strided_copy", 0}});
}

TEST(ComposeMoves, TrainingBindsKeepTheirMoves) {
  const Symbol w = Symbol::Variable("w");
  const Symbol x = Transpose(Reshape(Symbol::Variable("data"), {5, 3, 4}), {1, 0, 2});
  const Symbol net = Symbol::Op("sum", {Symbol::Op("mul", {Transpose(x, {0, 2, 1}), w})});
  BindRequest request;
  request.device = Device::Cpu();
  request.shapes = {{"data", Shape{15, 4}}, {"w", Shape{3, 4, 5}}};
  request.differentiate = {"w"};
  const BindResult bound = RunBindPipeline(net.ToGraph(), request);
  EXPECT_EQ(bound.composed_moves, 0);
  EXPECT_EQ(CountOps(bound.graph, "transpose"), 2u);
}

// Random chains of four to seven moves over a (2, 3, 4, 5) input (splits and merges of axes,
// permutations, slices), each read by a relu: whatever composes computes what the ops compute.
TEST(ComposeMoves, RandomChainsComputeWhatTheirOpsCompute) {
  std::mt19937 rng(7);
  int composed = 0;
  for (int chain = 0; chain < 60; ++chain) {
    Symbol x = Symbol::Variable("data");
    std::vector<int64_t> shape = {2, 3, 4, 5};
    const int length = 4 + static_cast<int>(rng() % 4);
    for (int step = 0; step < length; ++step) {
      const size_t n = shape.size();
      const int kind = static_cast<int>(rng() % 4);
      if (kind == 0 && n > 1) {  // merge two neighbours
        const size_t a = rng() % (n - 1);
        shape[a] *= shape[a + 1];
        shape.erase(shape.begin() + static_cast<int64_t>(a) + 1);
        x = Reshape(x, shape);
      } else if (kind == 1 && n < 6) {  // split an axis by a factor of its extent
        const size_t a = rng() % n;
        int64_t f = 1;
        for (int64_t d = 2; d < shape[a]; ++d)
          if (shape[a] % d == 0) f = d;
        if (f == 1) continue;
        shape[a] /= f;
        shape.insert(shape.begin() + static_cast<int64_t>(a) + 1, f);
        x = Reshape(x, shape);
      } else if (kind == 2) {  // a permutation
        std::vector<int64_t> axes(n), moved(n);
        for (size_t i = 0; i < n; ++i) axes[i] = static_cast<int64_t>(i);
        std::shuffle(axes.begin(), axes.end(), rng);
        for (size_t i = 0; i < n; ++i) moved[i] = shape[axes[i]];
        shape = moved;
        x = Transpose(x, axes);
      } else {  // a slice of an axis of more than one position
        const size_t a = rng() % n;
        if (shape[a] < 2) continue;
        const int64_t begin = static_cast<int64_t>(rng() % 2), end = shape[a] - (rng() % 2 ? 0 : 1);
        if (end - begin < 1) continue;
        shape[a] = end - begin;
        x = Slice(x, static_cast<int64_t>(a), begin, end);
      }
    }
    const Symbol net = Symbol::Op("relu", {x});
    composed += BindInference(net, Shape{2, 3, 4, 5}).composed_moves;
    SCOPED_TRACE("chain " + std::to_string(chain));
    ExpectSameOutputs(net, Shape{2, 3, 4, 5});
  }
  EXPECT_GT(composed, 30) << "most chains compose";
}

}  // namespace
}  // namespace weft
