// Pointwise fusion (passes/fuse_pointwise.h, the op _fused_pointwise): the pass finds the groups it
// should and keeps them convex and within one phase; bound graphs compute the same with fusion on
// and off, forward and backward, with every gradient request; the seed's XLNet pattern (144
// outputs, CSE off) runs; the switch is checked. Built for the CPU (ops_fusion_test: fused equals
// unfused bit for bit, since each step runs its op's own CPU compute on a tile) and for gpu:0
// (gpu_ops_fusion_test: a generated kernel, which may contract a * b + c into one FMA, so float32
// results agree within kFusedGpuTolerance of the unfused GPU ops).
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "executor/executor.h"
#include "graph/symbol.h"
#include "ops/fusion/fused_group.h"
#include "ops/fusion/internal/step_plan.h"
#include "ops/invocation.h"
#include "passes/cse.h"
#include "passes/fuse_pointwise.h"
#include "passes/gradient.h"
#include "passes/infer.h"
#include "storage/ndarray.h"
#include "tests/fusion_test_util.h"
#include "tests/op_test_util.h"
#include "tests/weft_test_util.h"

namespace weft::testing {
namespace {

// Fused float32 against unfused float32 on a GPU: one rounding of an FMA instead of two.
constexpr double kFusedGpuTolerance = 1e-6;

Graph Typed(const Symbol& s, const std::map<std::string, Shape>& shapes) {
  return InferShapesAndTypes(s.ToGraph(), shapes);
}

// The fused nodes of a graph.
std::vector<const FusedGroup*> Groups(const Graph& g) {
  std::vector<const FusedGroup*> groups;
  for (const Node& n : g.nodes()) {
    if (!n.is_variable() && n.op->name == "_fused_pointwise")
      groups.push_back(n.attrs.Get<FusedParam>().group.get());
  }
  return groups;
}

TEST(FusionPass, TheChainBecomesOneNodeOfEightSteps) {
  FusionStats stats;
  Graph g = FusePointwise(Typed(Chain(Var("x")), {{"x", Shape{4, 5}}}), &stats);
  EXPECT_EQ(stats.groups, 1u);
  EXPECT_EQ(stats.fused_nodes, 8u);
  ASSERT_EQ(g.nodes().size(), 2u);  // x and the fused node
  const std::vector<const FusedGroup*> groups = Groups(g);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0]->steps.size(), 8u);
  EXPECT_EQ(groups[0]->outputs.size(), 1u);
  EXPECT_EQ(groups[0]->num_inputs, 1u);
  EXPECT_EQ(g.shapes()[g.EntryId(g.outputs()[0])], (Shape{4, 5}));
}

// relu feeds add directly and through a transpose: relu and add in one group would be a cycle
// (relu -> transpose -> add).
TEST(FusionPass, AGroupNeverGoesAroundAnOpOutsideIt) {
  Symbol r = Op1("relu", Var("x"));
  Symbol y = Op1("exp", Op2("add", r, Op1("transpose", r)));
  FusionStats stats;
  Graph g = FusePointwise(Typed(y, {{"x", Shape{3, 3}}}), &stats);
  ASSERT_EQ(stats.groups, 1u);
  const FusedGroup& group = *Groups(g)[0];
  ASSERT_EQ(group.steps.size(), 2u);
  EXPECT_EQ(group.steps[0].op->name, "add");
  EXPECT_EQ(group.steps[1].op->name, "exp");
}

TEST(FusionPass, ForwardAndBackwardGroupsAreKeptApart) {
  Symbol loss = Op1("sum", Op1("sigmoid", Op2("add", Op2("mul", Var("x"), Var("w")), Var("b"))));
  Graph g = loss.ToGraph();
  std::vector<uint32_t> wrt;
  for (uint32_t n : g.ArgumentNodes()) wrt.push_back(n);
  g = InferShapesAndTypes(Gradient(g, wrt),
                          {{"x", Shape{4, 3}}, {"w", Shape{4, 3}}, {"b", Shape{4, 3}}});
  std::map<std::string, bool> backward;
  for (const Node& n : g.nodes()) backward[n.name] = n.is_backward();
  Graph fused = FusePointwise(g);
  const std::vector<const FusedGroup*> groups = Groups(fused);
  ASSERT_GE(groups.size(), 2u);
  bool saw_forward = false, saw_backward = false;
  for (const FusedGroup* group : groups) {
    for (const FusedGroup::Step& s : group->steps) {
      const bool recomputed =
          s.name.ends_with("_recomputed");  // a forward op copied into the backward
      EXPECT_EQ(recomputed || backward.at(s.name), group->backward) << s.name;
    }
    (group->backward ? saw_backward : saw_forward) = true;
  }
  EXPECT_TRUE(saw_forward && saw_backward);
}

// The gradient of the chain (as a loss under sum, and with a head gradient as gpu_bench binds
// it): its backward group recomputes the chain's values from x instead of reading them, so the
// forward group stores only its result and the backward reads x and dy and writes dx.
TEST(FusionPass, TheBackwardRecomputesTheChainInsteadOfReadingIt) {
  for (const Symbol& y : {Op1("sum", Chain(Var("x"))), Chain(Var("x"))}) {
    Graph g = y.ToGraph();
    g = InferShapesAndTypes(Gradient(g, g.ArgumentNodes()), {{"x", Shape{64}}});
    FusionStats stats;
    const Graph fused = FusePointwise(g, &stats);
    EXPECT_EQ(stats.recomputed, 6u)
        << "what relu's input and sigmoid's output, the values the gradient reads, are "
           "computed from (the last mul_scalar and add_scalar read nothing)";
    const std::vector<std::shared_ptr<const FusedGroup>> groups = FusedGroupsOf(fused);
    ASSERT_EQ(groups.size(), 2u);
    EXPECT_FALSE(groups[0]->backward);
    EXPECT_EQ(groups[0]->outputs.size(), 1u) << "the chain's intermediate values stay inside it";
    EXPECT_TRUE(groups[1]->backward);
    EXPECT_EQ(groups[1]->num_inputs, 2u) << "x and dy";
    EXPECT_EQ(groups[1]->outputs.size(), 1u) << groups[1]->label;
  }
}

// Without recomputing, the backward group reads the chain's values; the executor recomputes on a
// GPU only (passes/fuse_pointwise.h says why).
TEST(FusionPass, RecomputingIsTheBindingDevicesChoice) {
  Graph g = Chain(Var("x")).ToGraph();
  g = InferShapesAndTypes(Gradient(g, g.ArgumentNodes()), {{"x", Shape{64}}});
  FusionStats stats;
  const std::vector<std::shared_ptr<const FusedGroup>> groups =
      FusedGroupsOf(FusePointwise(g, &stats, /*recompute=*/false));
  EXPECT_EQ(stats.recomputed, 0u);
  ASSERT_EQ(groups.size(), 2u);
  // The gradient reads relu's input and sigmoid's output only (kGradReads): the scalar steps'
  // backward ops take dy alone, so their values stay inside the forward group.
  EXPECT_EQ(groups[0]->outputs.size(), 3u)
      << "forward stores its result and the two values its backward reads";
  EXPECT_EQ(groups[1]->num_inputs, 3u) << "dy, relu's input and sigmoid's output";

  ScopedEnv env("WEFT_USE_FUSION", "1");
  const Executor::ArrayMap args = {
      {"x", NDArray::FromVector(std::vector<float>(64, 0.5f), Shape{64}, TestDevice())}};
  const Executor::ArrayMap grads = {{"x", NDArray(Shape{64}, TestDevice())}};
  auto exec = Executor::Bind(Chain(Var("x")), TestDevice(), args, grads, {{"x", GradReq::kWrite}});
  EXPECT_GT(exec->stats().fused_groups, 0u);
  EXPECT_EQ(exec->stats().recomputed_nodes > 0, TestDevice().is_gpu())
      << exec->stats().recomputed_nodes;
}

// Recomputing stops at a value computed from more than two full-size entries: reading it once is
// cheaper than reading them all again.
TEST(FusionPass, AValueOfThreeFullSizeInputsIsReadNotRecomputed) {
  Graph g =
      Op1("sum", Op1("sigmoid", Op2("add", Op2("mul", Var("a"), Var("b")), Var("c")))).ToGraph();
  g = InferShapesAndTypes(Gradient(g, g.ArgumentNodes()),
                          {{"a", Shape{8}}, {"b", Shape{8}}, {"c", Shape{8}}});
  FusionStats stats;
  FusePointwise(g, &stats);
  EXPECT_EQ(stats.recomputed, 1u)
      << "mul (of a and b) is recomputed for add's backward; sigmoid (of a, b, c) is not";
}

// Outputs and gradients of one bound run.
struct RunResult {
  std::vector<std::vector<float>> outputs;
  std::map<std::string, std::vector<float>> grads;
};

RunResult BindAndRun(const Symbol& s, const std::map<std::string, Shape>& shapes, bool fusion,
                     GradReq req, uint64_t seed) {
  ScopedEnv env("WEFT_USE_FUSION", fusion ? "1" : "0");
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2, 2);
  Executor::ArrayMap args, grads;
  std::map<std::string, GradReq> reqs;
  for (const auto& [name, shape] : shapes) {
    std::vector<float> v(shape.Size()), g(shape.Size());
    for (float& x : v) x = u(rng);
    for (float& x : g) x = u(rng);  // what a kAdd request adds to
    args[name] = NDArray::FromVector(v, shape, TestDevice());
    grads[name] = NDArray::FromVector(g, shape, TestDevice());
    reqs[name] = req;
  }
  auto exec = Executor::Bind(s, TestDevice(), args,
                             req == GradReq::kNull ? Executor::ArrayMap{} : grads, reqs);
  EXPECT_EQ(exec->stats().fused_groups > 0, fusion) << "the graph has a group to fuse";
  exec->Forward(/*is_train=*/true);
  if (req != GradReq::kNull) exec->Backward();
  RunResult run;
  for (const NDArray& out : exec->outputs()) run.outputs.push_back(out.ToVector<float>());
  if (req != GradReq::kNull) {
    for (const auto& [name, g] : grads) run.grads[name] = g.ToVector<float>();
  }
  return run;
}

void ExpectClose(const std::vector<float>& fused, const std::vector<float>& unfused,
                 const std::string& what) {
  ASSERT_EQ(fused.size(), unfused.size()) << what;
  const bool exact = TestDevice().type == DeviceType::kCpu;
  for (size_t i = 0; i < fused.size(); ++i) {
    if (exact) {
      ASSERT_EQ(fused[i], unfused[i]) << what << "[" << i << "]";
    } else {
      ASSERT_NEAR(fused[i], unfused[i], kFusedGpuTolerance * (1 + std::abs(unfused[i])))
          << what << "[" << i << "]";
    }
  }
}

void ExpectFusedEqualsUnfused(const Symbol& s, const std::map<std::string, Shape>& shapes,
                              const std::string& what) {
  for (GradReq req : {GradReq::kNull, GradReq::kWrite, GradReq::kAdd}) {
    const std::string label = what + " (grad_req " + std::to_string(static_cast<int>(req)) + ")";
    const RunResult fused = BindAndRun(s, shapes, true, req, 7),
                    unfused = BindAndRun(s, shapes, false, req, 7);
    ASSERT_EQ(fused.outputs.size(), unfused.outputs.size());
    for (size_t o = 0; o < fused.outputs.size(); ++o) {
      ExpectClose(fused.outputs[o], unfused.outputs[o], label + " output " + std::to_string(o));
    }
    for (const auto& [name, g] : unfused.grads)
      ExpectClose(fused.grads.at(name), g, label + " d" + name);
  }
  MarkCovered("_fused_pointwise");
}

TEST(Fusion, TheChainComputesWhatTheUnfusedOpsCompute) {
  ExpectFusedEqualsUnfused(Op1("sum", Chain(Var("x"))), {{"x", Shape{1000, 37}}}, "chain");
}

// Outputs larger than the last-level cache (here made 8 MiB), written (not added to), are computed
// into a tile of their own and then stored streaming on the CPU (ops/cpu/fused_pointwise.cc): the
// chain's value and, in training, the values the backward group reads, over a last tile that is
// not full.
TEST(Fusion, LargeOutputsComputeWhatTheUnfusedOpsCompute) {
  ScopedEnv stream("WEFT_CPU_STREAM_MIB", "8");
  const Symbol y = Chain(Var("x"));
  ExpectFusedEqualsUnfused(Symbol::Group({Op1("sum", y), y}), {{"x", Shape{2049, 1024}}},
                           "large chain");
}

// A layer's epilogue: bias broadcast along rows, GELU, a residual, and a second output.
TEST(Fusion, BroadcastFanOutFanInAndSeveralOutputs) {
  Symbol x = Var("x"), b = Var("b"), r = Var("r");
  Symbol h = Op1("gelu", Op2("add", x, b));
  Symbol y = Op2("mul", Op2("add", h, r), Op1("tanh", h));
  Symbol z = Op1("Activation", Op2("sub", y, b), {{"act_type", "softrelu"}});
  Symbol loss = Op1("sum", Op2("add", Op1("sum", y), Op1("sum", z)));
  ExpectFusedEqualsUnfused(Symbol::Group({loss, y}),
                           {{"x", Shape{64, 33}}, {"b", Shape{33}}, {"r", Shape{64, 33}}},
                           "epilogue");
}

TEST(Fusion, ReshapesAddNAndCastsInsideAGroup) {
  Symbol x = Var("x"), w = Var("w");
  Symbol a = Op1("flatten", Op1("exp", Op1("reshape", x, {{"shape", "(6, 4, 5)"}})));
  Symbol c =
      Op1("Cast", Op1("Cast", Op2("mul", a, w), {{"dtype", "float64"}}), {{"dtype", "float32"}});
  Symbol s = Symbol::Op("add_n", {a, c, Op1("square", c)}, {{"num_args", "3"}});
  ExpectFusedEqualsUnfused(Op1("sum", Op1("expand_dims", s, {{"axis", "0"}})),
                           {{"x", Shape{24, 5}}, {"w", Shape{6, 20}}}, "reshapes");
}

// The seed (apache/mxnet#19316): one value reshaped 12 times, each reshape followed by 12
// expand_dims, with CSE off, makes one group of 144 outputs; MXNet's kernel overflowed CUDA's
// parameter space there.
TEST(Fusion, TheSeedsXLNetPatternWithoutCse) {
  ScopedEnv no_cse("WEFT_ELIMINATE_COMMON_EXPR", "0");
  const Symbol h = Op1("relu", Var("x"));  // the input, computed inside the group
  std::vector<Symbol> outs;
  for (int r = 0; r < 12; ++r) {
    Symbol reshaped = Op1("reshape", h, {{"shape", "(16, 8, 4)"}});
    for (int e = 0; e < 12; ++e)
      outs.push_back(Op1("expand_dims", reshaped, {{"axis", std::to_string(e % 4)}}));
  }
  const Symbol all = Symbol::Group(outs);
  FusionStats stats;
  Graph g = FusePointwise(Typed(all, {{"x", Shape{32, 16}}}), &stats);
  ASSERT_EQ(stats.groups, 1u);
  EXPECT_EQ(Groups(g)[0]->outputs.size(), 144u);
  const RunResult fused = BindAndRun(all, {{"x", Shape{32, 16}}}, true, GradReq::kNull, 3);
  const RunResult unfused = BindAndRun(all, {{"x", Shape{32, 16}}}, false, GradReq::kNull, 3);
  ASSERT_EQ(fused.outputs.size(), 144u);
  for (size_t o = 0; o < 144; ++o)
    ExpectClose(fused.outputs[o], unfused.outputs[o], "output " + std::to_string(o));
}

// A value that is an output with kAddTo and is read by a later step: the later step reads the
// value, not the sum.
TEST(Fusion, AnAddedOutputThatLaterStepsReadStaysTheValue) {
  const Symbol r = Op1("relu", Var("x"));
  Graph g = FusePointwise(Typed(Symbol::Group({r, Op1("exp", r)}), {{"x", Shape{3000}}}));
  ASSERT_EQ(Groups(g).size(), 1u);
  const Node* fused = nullptr;
  for (const Node& n : g.nodes()) fused = n.is_variable() ? fused : &n;
  ASSERT_EQ(fused->op->name, "_fused_pointwise");
  ASSERT_EQ(fused->attrs.Get<FusedParam>().group->outputs.size(), 2u);
  std::vector<float> xv(3000), old(3000, 10.0f);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i % 7) - 3.0f;
  NDArray x = NDArray::FromVector(xv, Shape{3000}, TestDevice());
  NDArray a = NDArray::FromVector(old, Shape{3000}, TestDevice()),
          e(Shape{3000}, TestDevice(), DType::kFloat32);
  for (bool prepared : {false, true}) {
    a.Fill(10.0);
    Invocation call(*fused->op, fused->attrs, TestDevice());
    call.AddInput(x.View(), x.var());
    call.AddOutput(a.View(), a.var(), OpReq::kAddTo);
    call.AddOutput(e.View(), e.var(), OpReq::kWrite);
    if (prepared) call.Prepare();
    engine::Engine::Get()->PushSync(
        [&](engine::RunContext run) {
          OpContext ctx;
          ctx.run = run;
          call.Run(ctx);
        },
        TestDevice(), call.reads(), call.writes());
    const std::vector<float> av = a.ToVector<float>(), ev = e.ToVector<float>();
    for (size_t i = 0; i < xv.size(); ++i) {
      const float relu = xv[i] > 0 ? xv[i] : 0.0f;
      ASSERT_EQ(av[i], 10.0f + relu) << i;
      ASSERT_NEAR(ev[i], std::exp(relu), 1e-6 * std::exp(relu)) << i;
    }
  }
}

// relu(x) stored, neg(exp(relu(x))) not asked for: exp is read only by neg, which is dead, so
// exp is dead too (FusedGroup::LiveSteps, which both devices' plans follow).
TEST(Fusion, AStepReadOnlyByADeadStepIsNotLive) {
  const Symbol r = Op1("relu", Var("x"));
  const Graph g =
      FusePointwise(Typed(Symbol::Group({r, Op1("neg", Op1("exp", r))}), {{"x", Shape{100}}}));
  ASSERT_EQ(Groups(g).size(), 1u);
  const FusedGroup& group = *Groups(g)[0];
  ASSERT_EQ(group.steps.size(), 3u);
  ASSERT_EQ(group.outputs.size(), 2u);
  const std::vector<int> producer = group.Producers();
  std::vector<OpReq> req(2, OpReq::kNull);
  for (size_t k = 0; k < req.size(); ++k) {
    if (producer[group.outputs[k]] == 0) req[k] = OpReq::kWriteInplace;  // relu's output only
  }
  EXPECT_EQ(group.LiveSteps(req), (std::vector<bool>{true, false, false}));
  const StepPlan plan(group, Device::Cpu(), req);
  EXPECT_TRUE(plan.runs(0));
  EXPECT_FALSE(plan.runs(1)) << "exp is read only by a step that does not run";
  EXPECT_FALSE(plan.runs(2));
  EXPECT_EQ(group.LiveSteps(std::vector<OpReq>(2, OpReq::kNull)), std::vector<bool>(3, false));
  EXPECT_EQ(group.LiveSteps(std::vector<OpReq>(2, OpReq::kAddTo)), std::vector<bool>(3, true));
}

TEST(Fusion, TheFusedOpCannotBeCalledOrLoaded) {
  ExpectErrorContains([] { Symbol::Op("_fused_pointwise", {Var("x")}); },
                      {"_fused_pointwise", "fusion pass"});
  ExpectErrorContains([] { ParseAttrs(GetOp("_fused_pointwise"), {}); }, {"cannot be called"});
}

TEST(Fusion, ABadSwitchValueIsAnErrorNamingIt) {
  ScopedEnv env("WEFT_USE_FUSION", "sometimes");
  Executor::ArrayMap args{
      {"x", NDArray::FromVector(std::vector<float>(4, 1.0f), Shape{4}, TestDevice())}};
  ExpectErrorContains([&] { Executor::Bind(Chain(Var("x")), TestDevice(), args); },
                      {"WEFT_USE_FUSION", "sometimes"});
}

// Fusion happens at binding: a bound symbol's JSON has no fused node, and loads and runs as saved
// with fusion off.
TEST(Fusion, TheJsonFormNeverHoldsFusedNodes) {
  const Symbol s = Chain(Var("x"));
  Executor::ArrayMap args{
      {"x", NDArray::FromVector(std::vector<float>(8, 0.5f), Shape{8}, TestDevice())}};
  auto exec = Executor::Bind(s, TestDevice(), args);
  const std::string json = s.ToJson();
  EXPECT_EQ(json.find("_fused"), std::string::npos);
  const RunResult fused =
      BindAndRun(Symbol::FromJson(json), {{"x", Shape{8}}}, true, GradReq::kNull, 1);
  const RunResult unfused =
      BindAndRun(Symbol::FromJson(json), {{"x", Shape{8}}}, false, GradReq::kNull, 1);
  ExpectClose(fused.outputs[0], unfused.outputs[0], "reloaded");
}

}  // namespace
}  // namespace weft::testing
