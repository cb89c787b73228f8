// The inference pass that has Attention read its operands where their strided copies would have
// read them, and write its result where the copy of it would have put it
// (passes/fold_attention_moves.h): PyTorch 1.13's export of nn.MultiheadAttention (heads merged
// into (1, B*H), a mask over merged heads) and a GPT's packed (B, T, 3, H, D) projection lose all
// four copies around their attention; a copy another op reads too, a result two ops read, and a
// k read across its rows keep theirs; training binds keep theirs. Outputs equal the unfolded
// graph's, bit for bit.
#include "passes/fold_attention_moves.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "passes/pipeline.h"
#include "tests/pass_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::BindCpu;
using testing::CountOps;
using testing::Reshape;
using testing::Slice;
using testing::Transpose;

constexpr int64_t kB = 2, kT = 5, kH = 3, kD = 4, kE = kH * kD;

Symbol Attention(const std::vector<Symbol>& in) {
  return Symbol::Op("Attention", in, {{"use_mask", in.size() == 4 ? "true" : "false"}});
}

// PyTorch 1.13's export: the projection (T, B, 3E) sliced into q, k and v, each seen as
// (T, B*H, D) and transposed to (B*H, T, D), a batch of one added for Attention, a padding mask
// over the merged heads (B*H, 1, T); the result back as (T*B, E). `extra`: a second reader of q's
// heads, or of the result.
enum class Extra { kNone, kQ, kOut };
Symbol MergedHeads(Extra extra = Extra::kNone) {
  const Symbol p = Symbol::Variable("data");
  std::vector<Symbol> heads;
  for (int64_t part = 0; part < 3; ++part) {
    const Symbol x =
        Transpose(Reshape(Slice(p, 2, part * kE, (part + 1) * kE), {kT, kB * kH, kD}), {1, 0, 2});
    heads.push_back(Symbol::Op("expand_dims", {x}, {{"axis", "0"}}));
  }
  const Symbol mask = Symbol::Variable("mask");
  const Symbol out = Reshape(Attention({heads[0], heads[1], heads[2], mask}), {kB * kH, kT, kD});
  const Symbol rows = Reshape(Transpose(out, {1, 0, 2}), {kT * kB, kE});
  std::vector<Symbol> outs = {Symbol::Op("relu", {rows})};
  if (extra == Extra::kQ) outs.push_back(Symbol::Op("relu", {heads[0]}));
  if (extra == Extra::kOut) outs.push_back(Symbol::Op("relu", {out}));
  return Symbol::Group(outs);
}

// A GPT's packed projection (B, T, 3, H, D): q, k and v to (B, H, T, D), causal, the result back
// to (B, T, E). With `k_across`, k is read transposed (B, H, D, T) and transposed back by hand.
Symbol PackedHeads(bool k_across = false, bool masked = false) {
  const Symbol p = Reshape(Symbol::Variable("data"), {kB, kT, 3, kH, kD});
  std::vector<Symbol> heads;
  for (int64_t part = 0; part < 3; ++part) {
    Symbol x = Reshape(Slice(p, 2, part, part + 1), {kB, kT, kH, kD});
    x = Transpose(x, {0, 2, 1, 3});
    if (part == 1 && k_across) x = Symbol::Op("relu", {Transpose(x, {0, 1, 3, 2})});
    if (part == 1 && k_across) x = Transpose(x, {0, 1, 3, 2});
    heads.push_back(x);
  }
  if (masked) heads.push_back(Symbol::Variable("mask"));
  const Symbol out =
      Symbol::Op("Attention", heads, {{"causal", "true"}, {"use_mask", masked ? "true" : "false"}});
  return Symbol::Op("relu", {Reshape(Transpose(out, {0, 2, 1, 3}), {kB, kT, kE})});
}

const Shape kMergedMask{kB * kH, 1, kT};

BindResult Bind(const Symbol& s, const Shape& data, std::set<std::string> differentiate = {},
                const Shape& mask = kMergedMask) {
  BindRequest request;
  request.device = Device::Cpu();
  request.shapes = {{"data", data}};
  const std::vector<std::string> names = s.ListArguments();
  if (std::find(names.begin(), names.end(), "mask") != names.end()) request.shapes["mask"] = mask;
  request.differentiate = std::move(differentiate);
  return RunBindPipeline(s.ToGraph(), request);
}

// Outputs with the pass on and off, the last key of every other mask row masked.
void ExpectSameOutputs(const Symbol& s, const Shape& data, const Shape& mask = kMergedMask) {
  const std::vector<std::string> names = s.ListArguments();
  const bool masked = std::find(names.begin(), names.end(), "mask") != names.end();
  std::map<std::string, Shape> shapes = {{"data", data}};
  if (masked) shapes["mask"] = mask;
  Executor::ArrayMap args = testing::RandomArguments(s, shapes);
  if (masked) {
    const int64_t keys = mask[mask.ndim() - 1];
    std::vector<float> m(mask.Size(), 0);
    for (int64_t row = 0; row < mask.Size() / keys; row += 2) m[row * keys + keys - 1] = -1e30f;
    args["mask"] = NDArray::FromVector(m, mask);
  }
  const auto off = testing::InferOutputs(s, args, "WEFT_FOLD_ATTENTION_MOVES", false);
  const auto on = testing::InferOutputs(s, args, "WEFT_FOLD_ATTENTION_MOVES", true);
  ASSERT_EQ(on.size(), off.size());
  for (size_t o = 0; o < on.size(); ++o) EXPECT_EQ(on[o], off[o]) << "output " << o;
}

const Shape kProjection{kT, kB, 3 * kE};

// The reshapes the pass adds to masks (named after their Attention, "_mask").
int MaskReshapes(const Graph& g) {
  int n = 0;
  for (const Node& node : g.nodes()) {
    n += node.op != nullptr && node.op->name == "reshape" && node.name.ends_with("_mask");
  }
  return n;
}

TEST(FoldAttentionMoves, MergedHeadsAsPyTorchExportsThemCopyNothing) {
  const BindResult bound = Bind(MergedHeads(), kProjection);
  EXPECT_EQ(bound.folded_attention_moves, 4);
  EXPECT_EQ(CountOps(bound.graph, "_strided_copy"), 0u);
  EXPECT_EQ(CountOps(bound.graph, "transpose"), 0u);
  EXPECT_EQ(MaskReshapes(bound.graph), 1) << "the (B*H, 1, T) mask seen as (B, H, 1, T)";
  ExpectSameOutputs(MergedHeads(), kProjection);
}

TEST(FoldAttentionMoves, APackedProjectionCopiesNothing) {
  const BindResult bound = Bind(PackedHeads(), Shape{kB, kT, 3 * kE});
  EXPECT_EQ(bound.folded_attention_moves, 4);
  EXPECT_EQ(CountOps(bound.graph, "_strided_copy"), 0u);
  ExpectSameOutputs(PackedHeads(), Shape{kB, kT, 3 * kE});
}

// q's copy read by a relu too stays (q is read from it); a result two ops read stays where it
// is; k read across its rows (its D not contiguous) is read from its transpose. The rest fold.
TEST(FoldAttentionMoves, CopiesOthersReadAndRowsThatAreNoRowsStay) {
  const struct {
    Symbol net;
    Shape data;
    int folded;
  } cases[] = {{MergedHeads(Extra::kQ), kProjection, 3},
               {MergedHeads(Extra::kOut), kProjection, 3},
               {PackedHeads(/*k_across=*/true), Shape{kB, kT, 3 * kE}, 3}};
  for (const auto& c : cases) {
    SCOPED_TRACE(std::to_string(&c - cases));
    const BindResult bound = Bind(c.net, c.data);
    EXPECT_EQ(bound.folded_attention_moves, c.folded);
    EXPECT_GE(CountOps(bound.graph, "_strided_copy") + CountOps(bound.graph, "transpose"), 1u);
    ExpectSameOutputs(c.net, c.data);
  }
}

// Masks that broadcast over the heads as the parts cut them need no reshape: a padding mask
// (B, 1, 1, T) where the heads stay (B, H), a (Tq, Tk) mask where they are merged.
TEST(FoldAttentionMoves, MasksThatBroadcastOverTheHeadsAreReadAsTheyAre) {
  const struct {
    Symbol net;
    Shape data, mask;
  } cases[] = {{PackedHeads(false, /*masked=*/true), Shape{kB, kT, 3 * kE}, Shape{kB, 1, 1, kT}},
               {MergedHeads(), kProjection, Shape{kT, kT}}};
  for (const auto& c : cases) {
    SCOPED_TRACE(std::to_string(&c - cases));
    const BindResult bound = Bind(c.net, c.data, {}, c.mask);
    EXPECT_EQ(bound.folded_attention_moves, 4);
    EXPECT_EQ(MaskReshapes(bound.graph), 0);
    ExpectSameOutputs(c.net, c.data, c.mask);
  }
}

// One attention's result, moved by a copy, is the next one's q: the first writes the copy's rows
// itself, and the second reads them as they are (the copy is folded once, not twice: folding it
// into both read the first's rows in the wrong order).
TEST(FoldAttentionMoves, ACopyBetweenTwoAttentionsIsFoldedOnce) {
  // (1, 2, 2, 4): H and T both 2, so the result's (B, T, H, D) seen as (B, H, T, D) is a q.
  const Symbol x = Symbol::Variable("data");
  std::vector<Symbol> qkv;
  for (int64_t part = 0; part < 3; ++part)
    qkv.push_back(Reshape(Slice(x, 0, part, part + 1), {1, 2, 2, 4}));
  const Symbol first = Symbol::Op("Attention", qkv, {});
  const Symbol moved = Reshape(Transpose(first, {0, 2, 1, 3}), {1, 2, 2, 4});
  const Symbol net = Symbol::Op("relu", {Symbol::Op("Attention", {moved, qkv[1], qkv[2]}, {})});
  const BindResult bound = Bind(net, Shape{3, 16});
  // the first's q copy and the copy of its result; k and v, which both read, keep theirs
  EXPECT_EQ(bound.folded_attention_moves, 2);
  EXPECT_EQ(CountOps(bound.graph, "_strided_copy"), 2u);
  ExpectSameOutputs(net, Shape{3, 16});
}

TEST(FoldAttentionMoves, TrainingBindsKeepTheirCopies) {
  const BindResult bound = Bind(PackedHeads(), Shape{kB, kT, 3 * kE}, {"data"});
  EXPECT_EQ(bound.folded_attention_moves, 0);
}

}  // namespace
}  // namespace weft
