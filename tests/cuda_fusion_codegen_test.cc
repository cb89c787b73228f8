// The fused-kernel generator (ops/gpu/fusion/codegen.h, kernel_plan.h) on a machine without a GPU:
// the sources it writes for many groups (forward and backward, broadcast, reshapes, add_n, casts,
// float64 and bfloat16, the seed's 144 outputs, 3,000 outputs) compile with NVRTC for sm_90 in
// every mode (pack width, index type, arguments by value or in a table, in parts), and NVRTC
// agrees with the host on the argument struct's size (the source asserts it; the fields are in
// an order that leaves no padding, so their offsets follow); the text is canonical (groups
// that differ only in scalars give the same text, naming no op or node); the plan carries only
// what the code reads; the parameter budget follows the toolkit, driver and device facts; the
// test-only bad code is rejected. Built with --config=cuda; NVRTC needs no device.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graph/symbol.h"
#include "ops/fusion/fused_group.h"
#include "ops/gpu/fusion/codegen.h"
#include "ops/gpu/fusion/kernel_parts.h"
#include "ops/gpu/fusion/kernel_plan.h"
#include "ops/gpu/fusion/param_budget.h"
#include "ops/gpu/fusion/step_code.h"
#include "ops/gpu/rtc/compile.h"
#include "passes/fuse_pointwise.h"
#include "passes/gradient.h"
#include "passes/infer.h"
#include "tests/fusion_test_util.h"

namespace weft::gpu {
namespace {

using GroupPtr = std::shared_ptr<const FusedGroup>;

using testing::Chain;
using testing::Op1;
using testing::Op2;
using testing::Scalar;
using testing::Var;

std::vector<GroupPtr> Fuse(const Symbol& s, const std::map<std::string, Shape>& shapes,
                           const std::map<std::string, DType>& dtypes = {}) {
  return testing::FusedGroupsOf(FusePointwise(InferShapesAndTypes(s.ToGraph(), shapes, dtypes)));
}

// The groups of the forward and backward graph of sum(s) with respect to every argument.
std::vector<GroupPtr> FuseWithGradient(const Symbol& s,
                                       const std::map<std::string, Shape>& shapes) {
  Graph g = Op1("sum", s).ToGraph();
  std::vector<uint32_t> wrt;
  for (uint32_t n : g.ArgumentNodes()) wrt.push_back(n);
  return testing::FusedGroupsOf(FusePointwise(InferShapesAndTypes(Gradient(g, wrt), shapes)));
}

std::vector<OpReq> Requests(const FusedGroup& g, OpReq req) {
  return std::vector<OpReq>(g.outputs.size(), req);
}

std::string Source(const FusedGroup& g, const KernelPlan& plan, const CodegenOptions& options) {
  std::string error;
  const std::optional<std::string> source = GenerateFusedSource(g, plan, options, &error);
  EXPECT_TRUE(source.has_value()) << g.label << ": " << error;
  return source.value_or("");
}

// Compiles `source` as the kernel library would for sm_90; returns NVRTC's log on failure, "" on
// success.
std::string CompileError(const std::string& source) {
  const rtc::CompileResult r =
      rtc::CompileToCubin("fused", source, kFusedKernelName, rtc::CompileOptions(90, {}));
  return r.cubin ? "" : "did not compile:\n" + r.log + "\n--- source ---\n" + source;
}

// Every mode the host may choose for `g`: widths 1 and 4, 32- and 64-bit indexing, by value and
// in a table; each must compile.
void ExpectEveryModeCompiles(const FusedGroup& g, OpReq req) {
  for (bool index64 : {false, true}) {
    const KernelPlan plan = PlanKernel(g, Requests(g, req), index64);
    for (int width : {1, 4}) {
      for (bool table : {false, true}) {
        const std::string source = Source(g, plan, {width, table, 90});
        ASSERT_EQ(CompileError(source), "")
            << g.label << " width " << width << " index64 " << index64 << " table " << table;
      }
    }
  }
}

// Two opposite modes (packs of 4, 32-bit, by value, one function; one element, 64-bit, a table,
// a function per step), for the groups below: every mode costs a compile of about a second.
void ExpectCompiles(const FusedGroup& g, OpReq req) {
  const KernelPlan narrow = PlanKernel(g, Requests(g, req), false),
                   wide = PlanKernel(g, Requests(g, req), true);
  ASSERT_EQ(CompileError(Source(g, narrow, {4, false, 90})), "") << g.label;
  ASSERT_EQ(CompileError(Source(g, wide, {1, true, 90, false, 1})), "") << g.label;
}

TEST(FusedCodegen, TheChainCompilesInEveryMode) {
  const std::vector<GroupPtr> groups = Fuse(Chain(Var("x"), 1.5), {{"x", Shape{1000, 37}}});
  ASSERT_EQ(groups.size(), 1u);
  ExpectEveryModeCompiles(*groups[0], OpReq::kWrite);
  ExpectEveryModeCompiles(*groups[0], OpReq::kAddTo);
}

// Bias broadcast along rows, GELU, residual, tanh, softrelu: broadcast walks and several outputs.
TEST(FusedCodegen, BroadcastFanOutAndBackwardGroupsCompile) {
  Symbol x = Var("x"), b = Var("b"), r = Var("r");
  Symbol h = Op1("gelu", Op2("add", x, b));
  Symbol y = Op2("mul", Op2("add", h, r), Op1("tanh", h));
  Symbol z = Op1("Activation", Op2("sub", y, b), {{"act_type", "softrelu"}});
  const std::map<std::string, Shape> shapes = {
      {"x", Shape{64, 33}}, {"b", Shape{33}}, {"r", Shape{64, 33}}};
  const std::vector<GroupPtr> groups =
      FuseWithGradient(Op2("add", Op1("sum", y), Op1("sum", z)), shapes);
  ASSERT_GE(groups.size(), 2u);
  bool backward = false;
  for (const GroupPtr& g : groups) {
    backward = backward || g->backward;
    ExpectCompiles(*g, OpReq::kWrite);
    ExpectCompiles(*g, OpReq::kAddTo);
  }
  EXPECT_TRUE(backward);
}

TEST(FusedCodegen, ReshapesAddNAndCastsCompile) {
  Symbol x = Var("x"), w = Var("w");
  Symbol a = Op1("flatten", Op1("exp", Op1("reshape", x, {{"shape", "(6, 4, 5)"}})));
  Symbol c =
      Op1("Cast", Op1("Cast", Op2("mul", a, w), {{"dtype", "float64"}}), {{"dtype", "float32"}});
  Symbol s = Symbol::Op("add_n", {a, c, Op1("square", c)}, {{"num_args", "3"}});
  const std::vector<GroupPtr> groups = FuseWithGradient(Op1("expand_dims", s, {{"axis", "0"}}),
                                                        {{"x", Shape{24, 5}}, {"w", Shape{6, 20}}});
  ASSERT_FALSE(groups.empty());
  for (const GroupPtr& g : groups) {
    ExpectCompiles(*g, OpReq::kWrite);
    ExpectCompiles(*g, OpReq::kAddTo);  // a cast that adds sums in double
  }
}

TEST(FusedCodegen, Float64AndBfloat16GroupsCompile) {
  for (DType t : {DType::kFloat64, DType::kBFloat16}) {
    const Symbol s = Op2("mul", Chain(Var("x"), 3.0), Var("b"));
    const std::vector<GroupPtr> groups =
        Fuse(s, {{"x", Shape{8, 16}}, {"b", Shape{16}}}, {{"x", t}, {"b", t}});
    ASSERT_EQ(groups.size(), 1u) << t;
    ExpectCompiles(*groups[0], OpReq::kWrite);
  }
}

// The seed's pattern (CSE off: the pass never merges): 144 outputs of 4 dimensions each.
TEST(FusedCodegen, TheSeedsXLNetPatternCompilesAndOnlyItsPointersAreArguments) {
  const std::vector<GroupPtr> groups =
      Fuse(testing::XLNetPattern(Var("x")), {{"x", Shape{32, 16}}});
  ASSERT_EQ(groups.size(), 1u);
  ASSERT_EQ(groups[0]->outputs.size(), 144u);
  const KernelPlan plan = PlanKernel(*groups[0], Requests(*groups[0], OpReq::kWrite), false);
  EXPECT_EQ(plan.bytes,
            (1 + 144) * 8 + 8u);  // one input, 144 outputs, the count (padded): no shapes
  EXPECT_LE(plan.bytes, kSmallParamBudget);  // MXNet's kernel needed 4,648 bytes here
  const std::string source = Source(*groups[0], plan, {4, false, 90});
  EXPECT_EQ(source.find("__noinline__"), std::string::npos);  // 145 values and stores: one function
  EXPECT_EQ(CompileError(source), "");
  ExpectCompiles(*groups[0], OpReq::kAddTo);
}

// One input, relu, then 3,000 add_scalar with distinct scalars, each an output: 48 KB of
// pointers and scalars, over any parameter budget, so only the table can carry them.
TEST(FusedCodegen, ThreeThousandOutputsCompileWithTheirArgumentsInATable) {
  const Symbol h = Op1("relu", Var("x"));
  std::vector<Symbol> outs;
  for (int k = 0; k < 3000; ++k) outs.push_back(Scalar("add_scalar", h, 0.001 * k));
  const std::vector<GroupPtr> groups = Fuse(Symbol::Group(outs), {{"x", Shape{64}}});
  ASSERT_EQ(groups.size(), 1u);
  const KernelPlan plan = PlanKernel(*groups[0], Requests(*groups[0], OpReq::kWrite), false);
  EXPECT_GT(plan.bytes, kLargeParamBudget);
  // One element at a time, as the host compiles a group this large, in 24 parts.
  const std::string source = Source(*groups[0], plan, {1, /*table=*/true, 90});
  EXPECT_NE(source.find("__noinline__ void Part23_1("), std::string::npos);
  EXPECT_EQ(source.find("__noinline__ void Part24_1("), std::string::npos);
  EXPECT_EQ(CompileError(source), "");
}

TEST(FusedCodegen, GroupsThatDifferInScalarsAndSizesShareOneSourceNamingNoOp) {
  const GroupPtr a = Fuse(Chain(Var("x"), 1.5), {{"x", Shape{1000}}})[0];
  const GroupPtr b = Fuse(Chain(Var("y"), -7.0), {{"y", Shape{77, 3}}})[0];
  const std::vector<OpReq> req = Requests(*a, OpReq::kWrite);
  const std::string sa = Source(*a, PlanKernel(*a, req, false), {4, false, 90});
  EXPECT_EQ(sa, Source(*b, PlanKernel(*b, req, false), {4, false, 90}));
  for (const FusedGroup::Step& s : a->steps) {
    EXPECT_EQ(sa.find(s.name), std::string::npos) << s.name;
    EXPECT_EQ(sa.find(s.op->name), std::string::npos) << s.op->name;
  }
  EXPECT_EQ(sa.find("//"), std::string::npos);  // no comments
  EXPECT_EQ(sa.find("/*"), std::string::npos);
}

TEST(FusedCodegen, ThePlanCarriesOnlyWhatTheCodeReads) {
  const GroupPtr g = Fuse(Chain(Var("x"), 1.5), {{"x", Shape{1000}}})[0];
  const KernelPlan plan = PlanKernel(*g, Requests(*g, OpReq::kWrite), false);
  // in0, out0, six scalars (relu and sigmoid take none), then the int count: 8 * 8 + 4, padded.
  EXPECT_EQ(plan.bytes, 72u);
  ASSERT_EQ(plan.fields.size(), 9u);
  EXPECT_EQ(plan.fields.back().name, "n");
  EXPECT_EQ(plan.fields.back().size, 4u);
  EXPECT_EQ(PlanKernel(*g, Requests(*g, OpReq::kWrite), true).fields.back().size, 8u);
  // Nothing stored: nothing computed, nothing loaded.
  const KernelPlan none = PlanKernel(*g, Requests(*g, OpReq::kNull), false);
  EXPECT_TRUE(StoresNothing(none));
  for (bool live : none.live) EXPECT_FALSE(live);
  EXPECT_EQ(none.bytes, 8u);  // the count alone
}

// A bias (33) read over (64, 33): one walk whose offset is i % 33, so the kernel gets that extent
// and nothing else; a row broadcast (64, 1) gets i / 33.
TEST(FusedCodegen, BroadcastWalksAreMergedAndCarryOnlyTheExtentsTheyDivideBy) {
  Symbol x = Var("x");
  const Symbol s = Op2("mul", Op2("add", Op1("relu", x), Var("bias")), Var("row"));
  const GroupPtr g = Fuse(s, {{"x", Shape{64, 33}}, {"bias", Shape{33}}, {"row", Shape{64, 1}}})[0];
  const KernelPlan plan = PlanKernel(*g, Requests(*g, OpReq::kWrite), false);
  ASSERT_EQ(plan.walks.size(), 2u);
  std::vector<std::string> names;
  for (const ArgField& f : plan.fields) {
    if (f.kind == ArgField::Kind::kDim || f.kind == ArgField::Kind::kStride)
      names.push_back(f.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"w0d1", "w1d1"}));
  for (const BroadcastWalk& w : plan.walks) EXPECT_EQ(w.ndim, 2);
  EXPECT_EQ(CompileError(Source(*g, plan, {4, false, 90})), "");
}

TEST(FusedCodegen, TheArgumentBytesAreWhereTheStructHasThem) {
  const GroupPtr g = Fuse(Chain(Var("x"), 1.5), {{"x", Shape{1000}}})[0];
  const KernelPlan plan = PlanKernel(*g, Requests(*g, OpReq::kWrite), false);
  float in = 0, out = 0;
  const TensorView x(&in, Shape{1000}, DType::kFloat32, Device::Cpu()),
      y(&out, Shape{1000}, DType::kFloat32, Device::Cpu());
  const std::vector<uint64_t> words = FillArgs(plan, *g, {&x, 1}, {&y, 1});
  ASSERT_EQ(words.size() * 8, plan.bytes);
  const char* bytes = reinterpret_cast<const char*>(words.data());
  for (const ArgField& f : plan.fields) {
    if (f.kind == ArgField::Kind::kInput || f.kind == ArgField::Kind::kOutput) {
      void* p = nullptr;
      std::memcpy(&p, bytes + f.offset, 8);
      EXPECT_EQ(p, f.kind == ArgField::Kind::kInput ? x.raw() : y.raw()) << f.name;
    }
    if (f.kind == ArgField::Kind::kScalar) {
      double s = 0;
      std::memcpy(&s, bytes + f.offset, 8);
      const FusedGroup::Step& step = g->steps[f.index];
      EXPECT_EQ(s, step.op->pointwise.Scalars(step.attrs).values[f.axis]) << f.name;
    }
    if (f.kind == ArgField::Kind::kCount) {
      int32_t n = 0;
      std::memcpy(&n, bytes + f.offset, 4);
      EXPECT_EQ(n, 1000);
    }
  }
}

// The chain in parts of 3 values or stores: each part reads what the part before it defined, and
// hands on only what a later part reads (the output is stored inside the last part).
// clip's functor takes two scalars: its steps (forward and backward) get two fields each,
// s<step> = a_min and t<step> = a_max, which the code passes to Clip::Fwd and BackwardOf; the
// groups compile.
TEST(FusedCodegen, AStepOfTwoScalarsGetsAFieldForEach) {
  const Symbol x = Var("x");
  const Symbol y = Op1("tanh", Op1("clip", Op1("exp", x), {{"a_min", "0.25"}, {"a_max", "6"}}));
  std::set<std::string> ops;               // those whose steps got scalar fields
  std::map<const void*, int> step_fields;  // per step: how many
  for (const GroupPtr& g : FuseWithGradient(y, {{"x", Shape{100, 3}}})) {
    ExpectCompiles(*g, OpReq::kWrite);
    const KernelPlan plan = PlanKernel(*g, Requests(*g, OpReq::kWrite), false);
    float buffer = 0;
    const TensorView any(&buffer, Shape{300}, DType::kFloat32, Device::Cpu());
    const std::vector<TensorView> inputs(g->num_inputs, any), outputs(g->outputs.size(), any);
    const std::vector<uint64_t> words = FillArgs(plan, *g, inputs, outputs);
    for (const ArgField& f : plan.fields) {
      if (f.kind != ArgField::Kind::kScalar) continue;
      double value = 0;
      std::memcpy(&value, reinterpret_cast<const char*>(words.data()) + f.offset, 8);
      EXPECT_EQ(f.name, ScalarField(f.index, f.axis));
      EXPECT_EQ(value, f.axis == 0 ? 0.25 : 6.0) << f.name;
      ops.insert(g->steps[f.index].op->name);
      ++step_fields[&g->steps[f.index]];
    }
  }
  EXPECT_EQ(ops, (std::set<std::string>{"clip", "_backward_clip"}));
  for (const auto& [step, count] : step_fields) EXPECT_EQ(count, 2);
}

TEST(FusedCodegen, PartsPassOnOnlyTheValuesLaterPartsRead) {
  const GroupPtr g = Fuse(Chain(Var("x"), 1.5), {{"x", Shape{1000}}})[0];
  const KernelPlan plan = PlanKernel(*g, Requests(*g, OpReq::kWrite), false);
  const StepCode code(*g, plan);
  const std::vector<KernelPart> parts = SplitIntoParts(*g, plan, code, 3);
  ASSERT_EQ(parts.size(), 3u);
  const auto names = [](const std::vector<Operand>& ops) {
    std::vector<std::string> n;
    for (const Operand& o : ops) n.push_back(o.Name());
    return n;
  };
  using Names = std::vector<std::string>;
  EXPECT_EQ(names(parts[0].ins), Names{"v0"});
  EXPECT_EQ(names(parts[0].outs), Names{"v3"});
  EXPECT_EQ(names(parts[1].ins), Names{"v3"});
  EXPECT_EQ(names(parts[1].outs), Names{"v6"});
  EXPECT_EQ(names(parts[2].ins), Names{"v6"});
  EXPECT_TRUE(parts[2].outs.empty());
  EXPECT_EQ(CompileError(Source(*g, plan, {4, false, 90, false, 3})), "");
}

TEST(FusedCodegen, TheTestOnlyBadCodeIsRejectedByNvrtc) {
  const GroupPtr g = Fuse(Chain(Var("x"), 1.5), {{"x", Shape{1000}}})[0];
  const KernelPlan plan = PlanKernel(*g, Requests(*g, OpReq::kWrite), false);
  const std::string error = CompileError(Source(*g, plan, {4, false, 90, /*bad_code=*/true}));
  EXPECT_NE(error.find("WEFT_FUSION_TEST_BAD_CODE"), std::string::npos) << error;
}

TEST(ParamBudget, FollowsTheRuntimeTheDriverNvrtcAndTheDevice) {
  EXPECT_EQ(ParamBudgetFor({12010, 12010, 12010, 70}), kLargeParamBudget);
  EXPECT_EQ(ParamBudgetFor({13000, 13000, 13000, 90}), 32764u);
  EXPECT_EQ(ParamBudgetFor({12000, 13000, 13000, 90}), kSmallParamBudget);  // runtime before 12.1
  EXPECT_EQ(ParamBudgetFor({13000, 12000, 13000, 90}), kSmallParamBudget);  // driver before 12.1
  EXPECT_EQ(ParamBudgetFor({13000, 13000, 12000, 90}), kSmallParamBudget);  // NVRTC before 12.1
  EXPECT_EQ(ParamBudgetFor({13000, 13000, 13000, 61}), 4096u);              // before Volta
}

}  // namespace
}  // namespace weft::gpu
