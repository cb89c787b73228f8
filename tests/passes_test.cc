// passes/: each pass alone. CSE on the XLNet pattern from the MXNet seed, random ops kept apart,
// workspace-requesting ops merged; the gradient pass's structure; memory planning smaller than one
// buffer per entry, with in-place runs; write-backs moved last; the bind pipeline's order and
// switches.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "graph/symbol.h"
#include "ops/op.h"
#include "passes/cse.h"
#include "passes/gradient.h"
#include "passes/infer.h"
#include "passes/pipeline.h"
#include "passes/plan_memory.h"
#include "passes/prune.h"
#include "passes/write_backs_last.h"
#include "tests/pass_test_util.h"
#include "tests/weft_test_util.h"

namespace weft {
namespace {

size_t CountOps(const Graph& g, const std::string& op) {
  size_t n = 0;
  for (const Node& node : g.nodes()) n += !node.is_variable() && node.op->name == op;
  return n;
}

// seeds/runtime-fusion-regression-issue.txt: one input reshaped 12 times the same way, each
// reshape followed by the same 12 expand_dims. MXNet's CSE kept the 144 expand_dims (oneDNN
// builds gave expand_dims a workspace request), and the fused kernel's parameters overflowed.
Symbol XlnetPattern() {
  Symbol x = Symbol::Variable("x");
  std::vector<Symbol> outs;
  for (int r = 0; r < 12; ++r) {
    Symbol reshaped = Symbol::Op("reshape", {x}, {{"shape", "(0, 2, -1)"}});
    for (int e = 0; e < 12; ++e)
      outs.push_back(Symbol::Op("expand_dims", {reshaped}, {{"axis", "1"}}));
  }
  return Symbol::Group(outs);
}

TEST(Cse, XlnetPatternCollapsesToOneReshapeAndOneExpandDims) {
  Graph before = XlnetPattern().ToGraph();
  EXPECT_EQ(CountOps(before, "reshape"), 12u);
  EXPECT_EQ(CountOps(before, "expand_dims"), 144u);
  Graph after = EliminateCommonExpr(before);
  EXPECT_EQ(CountOps(after, "reshape"), 1u);
  EXPECT_EQ(CountOps(after, "expand_dims"), 1u);
  ASSERT_EQ(after.outputs().size(), 144u) << "every output is still there";
  for (const NodeEntry& e : after.outputs())
    EXPECT_TRUE(e == after.outputs()[0]) << "all read the one expand_dims";
}

TEST(Cse, RandomOpsAreNeverMerged) {
  Symbol x = Symbol::Variable("x");
  Symbol a = Symbol::Op("Dropout", {x}, {{"p", "0.5"}}),
         b = Symbol::Op("Dropout", {x}, {{"p", "0.5"}});
  Graph g = EliminateCommonExpr(Symbol::Group({a[0], b[0]}).ToGraph());
  EXPECT_EQ(CountOps(g, "Dropout"), 2u);
}

TEST(Cse, OpsThatMutateAnInputAreNeverMerged) {
  Symbol w = Symbol::Variable("w"), g = Symbol::Variable("g"), mom = Symbol::Variable("mom");
  const AttrMap attrs = {{"lr", "0.1"}, {"momentum", "0.9"}};
  Graph merged =
      EliminateCommonExpr(Symbol::Group({Symbol::Op("sgd_mom_update", {w, g, mom}, attrs),
                                         Symbol::Op("sgd_mom_update", {w, g, mom}, attrs)})
                              .ToGraph());
  EXPECT_EQ(CountOps(merged, "sgd_mom_update"), 2u)
      << "two updates of one momentum are two updates";
}

TEST(Cse, ReadsOfAStateBeforeAndAfterItIsMutatedAreNotMerged) {
  // relu(mom) twice before an update of mom, once after it: the two before are one value, the one
  // after another.
  Symbol w = Symbol::Variable("w"), g = Symbol::Variable("g"), mom = Symbol::Variable("mom");
  Graph merged =
      EliminateCommonExpr(Symbol::Group({Symbol::Op("relu", {mom}), Symbol::Op("relu", {mom}),
                                         Symbol::Op("sgd_mom_update", {w, g, mom},
                                                    {{"lr", "0.1"}, {"momentum", "0.9"}}),
                                         Symbol::Op("relu", {mom})})
                              .ToGraph());
  EXPECT_EQ(CountOps(merged, "relu"), 2u);
  ASSERT_EQ(merged.outputs().size(), 4u);
  EXPECT_TRUE(merged.outputs()[0] == merged.outputs()[1]);
  EXPECT_FALSE(merged.outputs()[3] == merged.outputs()[0]);
}

TEST(Cse, DifferentAttributesOrInputsAreNotMerged) {
  Symbol x = Symbol::Variable("x"), y = Symbol::Variable("y");
  Graph g = EliminateCommonExpr(Symbol::Group({Symbol::Op("add_scalar", {x}, {{"scalar", "1"}}),
                                               Symbol::Op("add_scalar", {x}, {{"scalar", "2"}}),
                                               Symbol::Op("add_scalar", {y}, {{"scalar", "1"}})})
                                    .ToGraph());
  EXPECT_EQ(CountOps(g, "add_scalar"), 3u);
}

// An identity that computes through temporary workspace, registered for this test only. An op
// declares no workspace: it asks OpContext::Workspace when it runs, so nothing a pass reads can
// differ between builds because of it (MXNet's CSE refused ops that declared workspace, and
// expand_dims declared it only in oneDNN builds: the first seed).
void WorkspaceIdentity(const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                       std::span<const OpReq>, std::span<const TensorView> out) {
  void* scratch = ctx.Workspace(in[0].bytes());
  std::memcpy(scratch, in[0].raw(), in[0].bytes());
  std::memcpy(out[0].raw(), scratch, in[0].bytes());
}
WEFT_REGISTER_OP(_test_workspace_identity)
    .Describe("identity that computes through workspace (test only)")
    .Inputs({"data"})
    .InferShape([](const Attrs&, const std::vector<Shape>& in) {
      return std::vector<Shape>{in[0]};
    });
WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu,
                           {{"_test_workspace_identity", {.compute = WorkspaceIdentity}}});

TEST(Cse, OpsThatUseWorkspaceAreMerged) {
  Symbol x = Symbol::Variable("x");
  Graph g = EliminateCommonExpr(Symbol::Group({Symbol::Op("_test_workspace_identity", {x}),
                                               Symbol::Op("_test_workspace_identity", {x})})
                                    .ToGraph());
  EXPECT_EQ(CountOps(g, "_test_workspace_identity"), 1u);
}

TEST(GradientPass, SumsGradientsOfSharedEntriesAndPrunesWhatIsNotNeeded) {
  // y = exp(x) * exp(x) + w: x's entry exp(x) feeds two inputs of mul.
  Symbol x = Symbol::Variable("x"), w = Symbol::Variable("w");
  Symbol e = Symbol::Op("exp", {x}, {}, "e");
  Symbol y = Symbol::Op("add", {Symbol::Op("mul", {e, e}, {}, "m"), w}, {}, "y");
  Graph fwd = y.ToGraph();
  uint32_t x_node = fwd.ArgumentNodes()[0], w_node = fwd.ArgumentNodes()[1];
  Graph both = Gradient(fwd, {x_node, w_node});
  EXPECT_EQ(both.outputs().size(), 3u);
  EXPECT_EQ(both.num_forward_outputs(), 1u);
  EXPECT_EQ(CountOps(both, "add_n"), 1u) << "the two gradients into exp(x) are summed once";
  EXPECT_EQ(CountOps(both, "_backward_exp"), 1u);
  Graph only_w = Gradient(fwd, {w_node});
  EXPECT_EQ(CountOps(only_w, "_backward_exp"), 0u)
      << "x's gradient was not asked for: its work is pruned";
  EXPECT_EQ(CountOps(only_w, "_backward_mul"), 0u);
}

TEST(Prune, DropsWhatNoOutputNeedsAndKeepsEveryArgument) {
  Symbol x = Symbol::Variable("x"), unused = Symbol::Variable("unused");
  Symbol dead = Symbol::Op("exp", {unused}, {}, "dead");
  Symbol y = Symbol::Op("relu", {x}, {}, "y");
  GraphBuilder b = Symbol::Group({y, dead}).ToGraph().ToBuilder();
  b.outputs.pop_back();  // nothing reads `dead` now
  b.num_forward_outputs = 1;
  const Graph g = Prune(std::move(b).Freeze());
  EXPECT_EQ(CountOps(g, "exp"), 0u);
  EXPECT_EQ(g.ArgumentNodes().size(), 2u) << "arguments stay, so binding by name is unchanged";
  EXPECT_EQ(g.node(g.outputs()[0].node).name, "y");
}

// up = sgd_update(w, relu(w)) is a write-back; exp(w), after it in the graph, must run before it.
TEST(WriteBacksLast, MovesTheWriteBackNodesAfterEveryOtherNode) {
  Symbol w = Symbol::Variable("w");
  Symbol update = Symbol::Op("sgd_update", {w, Symbol::Op("relu", {w})}, {{"lr", "0.1"}}, "up");
  Symbol other = Symbol::Op("exp", {w}, {}, "other");
  const Graph g = InferShapesAndTypes(Symbol::Group({update, other}).ToGraph(), {{"w", Shape{4}}});
  GraphBuilder b = g.ToBuilder();
  std::swap(b.outputs[0], b.outputs[1]);  // the write-back is the last output
  b.num_forward_outputs = 1;
  const Graph ordered = std::move(b).Freeze().WithTypes(g.shapes(), g.dtypes());
  const Graph last = WriteBacksLast(ordered, 1);
  EXPECT_EQ(last.node(last.nodes().size() - 1).name, "up");
  EXPECT_EQ(last.node(last.outputs()[1].node).name, "up");
  EXPECT_EQ(last.node(last.outputs()[0].node).name, "other");
  EXPECT_EQ(last.shapes()[last.EntryId(last.outputs()[1])], Shape{4}) << "types follow";
  Symbol r = Symbol::Op("relu", {w}, {}, "r");
  const Graph read = InferShapesAndTypes(
      Symbol::Group({Symbol::Op("exp", {r}, {}, "e"), r}).ToGraph(), {{"w", Shape{4}}});
  EXPECT_NE(testing::ErrorMessage([&] {
              WriteBacksLast(read, 1);
            }).find("node 'e' reads a write_back output"),
            std::string::npos)
      << "e reads r, the output written back";
}

TEST(PlanMemory, ReusesBuffersAndRunsInPlace) {
  // A chain of elementwise ops: each intermediate dies right after its user.
  Symbol x = Symbol::Variable("x");
  Symbol h = x;
  for (int i = 0; i < 8; ++i) h = Symbol::Op(i % 2 ? "relu" : "exp", {h});
  Graph g = InferShapesAndTypes(h.ToGraph(), {{"x", Shape{256, 256}}});
  std::vector<bool> external(g.num_entries(), false);
  external[g.EntryId({0, 0})] = true;
  external[g.EntryId(g.outputs()[0])] = true;
  Graph planned = PlanMemory(g, external);
  const MemoryPlan& plan = planned.memory();
  EXPECT_EQ(plan.naive_bytes, 7u * 256 * 256 * 4);
  EXPECT_EQ(plan.total_bytes, 256u * 256 * 4) << "one buffer, used in place by every op";
  size_t inplace = 0;
  for (bool b : plan.inplace) inplace += b;
  EXPECT_EQ(inplace, 6u);
  Graph no_inplace = PlanMemory(g, external, {.reuse = true, .inplace = false});
  EXPECT_EQ(no_inplace.memory().total_bytes, 2u * 256 * 256 * 4) << "two buffers, alternating";
  Graph naive = PlanMemory(g, external, {.reuse = false, .inplace = false});
  EXPECT_EQ(naive.memory().total_bytes, naive.memory().naive_bytes);
}

TEST(PlanMemory, AReaderOfTheShapeOnlyNeitherHoldsABufferNorBlocksInPlace) {
  // h = exp(x); r = reshape(h) is h's last reader of values, so it runs in place though the
  // gradient's reshape_like(.., h) reads h later, for its shape (Op::ReadsInputValues).
  Symbol x = Symbol::Variable("x");
  Symbol h = Symbol::Op("exp", {x});
  Symbol r = Symbol::Op("reshape", {h}, {{"shape", "(-1,)"}});
  Symbol y = Symbol::Op("reshape_like", {Symbol::Op("relu", {r}), h});
  Graph g = InferShapesAndTypes(y.ToGraph(), {{"x", Shape{64, 64}}});
  std::vector<bool> external(g.num_entries(), false);
  external[g.EntryId({0, 0})] = true;
  external[g.EntryId(g.outputs()[0])] = true;
  const Graph planned = PlanMemory(g, external);
  const MemoryPlan& plan = planned.memory();
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    if (g.node(n).is_variable()) continue;
    const uint32_t e = g.EntryId({n, 0});
    if (g.node(n).op->name == "exp") {
      EXPECT_EQ(g.EntryUseCounts()[e], 2u) << "reshape and reshape_like read h";
      EXPECT_EQ(g.EntryValueUseCounts()[e], 1u) << "reshape_like reads its shape only";
    }
    if (g.node(n).op->name == "reshape") EXPECT_TRUE(plan.inplace[e]) << "reshape writes over h";
  }
  EXPECT_EQ(plan.total_bytes, 64u * 64 * 4) << "exp, reshape and relu share one buffer";
}

// h = exp(x) is read by r = reshape(h) and, later, by exp(h): r is a view of h's buffer (no
// copy); relu(r), r's last reader, may not write over it in place while h is still to be read,
// and the outputs are those of a bind with every entry in a buffer of its own.
TEST(PlanMemory, AReshapeWhoseInputIsReadLaterIsAViewNothingWritesOverInPlace) {
  Symbol h = Symbol::Op("exp", {Symbol::Variable("data")});
  Symbol a = Symbol::Op("relu", {Symbol::Op("reshape", {h}, {{"shape", "(-1,)"}})});
  Symbol y = Symbol::Op(
      "add", {Symbol::Op("reshape", {a}, {{"shape", "(64, 64)"}}), Symbol::Op("exp", {h})});
  Graph g = InferShapesAndTypes(y.ToGraph(), {{"data", Shape{64, 64}}});
  std::vector<bool> external(g.num_entries(), false);
  external[g.EntryId({0, 0})] = true;
  external[g.EntryId(g.outputs()[0])] = true;
  const MemoryPlan plan = PlanMemory(g, external).memory();
  std::map<std::string, int> id;  // the first node of each op's buffer
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    if (!g.node(n).is_variable() && !id.contains(g.node(n).op->name))
      id[g.node(n).op->name] = plan.storage_id[g.EntryId({n, 0})];
  }
  EXPECT_EQ(id["reshape"], id["exp"]) << "the reshape is a view of h";
  EXPECT_NE(id["relu"], id["exp"]) << "relu would write over h, which exp(h) reads after it";
  const Executor::ArrayMap args = testing::RandomArguments(y, {{"data", Shape{64, 64}}});
  EXPECT_EQ(testing::InferOutputs(y, args, "WEFT_PLAN_MEMORY", true),
            testing::InferOutputs(y, args, "WEFT_PLAN_MEMORY", false));
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

std::vector<std::string> PassNames(const BindResult& r) {
  std::vector<std::string> names;
  for (const BindResult::Pass& pass : r.passes) names.push_back(pass.name);
  return names;
}

// loss = sum(exp(x * w) + x), differentiated with respect to w: a pointwise chain fusion takes.
BindRequest MulExpRequest() {
  BindRequest request;
  request.device = Device::Cpu();
  request.differentiate = {"w"};
  request.shapes = {{"x", Shape{8}}, {"w", Shape{8}}};
  return request;
}

Graph MulExp() {
  Symbol x = Symbol::Variable("x"), w = Symbol::Variable("w");
  Symbol y = Symbol::Op("add", {Symbol::Op("exp", {Symbol::Op("mul", {x, w})}), x});
  return Symbol::Op("sum", {y}).ToGraph();
}

TEST(BindPipeline, RunsThePassesInOrderAndReturnsAPlannedGraph) {
  const BindResult r = RunBindPipeline(MulExp(), MulExpRequest());
  EXPECT_EQ(PassNames(r), (std::vector<std::string>{"eliminate_common_expr", "gradient", "extend",
                                                    "infer_shapes_and_types", "fold_grad_cast",
                                                    "pass_gradients_through", "blocked_layout",
                                                    "fuse_pointwise", "plan_memory"}));
  EXPECT_EQ(r.grad_args, std::vector<std::string>{"w"});
  EXPECT_GT(r.fusion.groups, 0u);
  EXPECT_EQ(CountOps(r.graph, "_fused_pointwise"), r.fusion.groups);
  EXPECT_TRUE(r.graph.has_memory_plan());
  EXPECT_EQ(&r.graph.nodes(), &r.passes.back().graph.nodes()) << "the last pass's graph";
  EXPECT_EQ(r.graph.outputs().size(), 2u) << "the loss, then w's gradient";
}

TEST(BindPipeline, EachSwitchTurnsItsPassOff) {
  {
    testing::ScopedEnv off("WEFT_USE_FUSION", "0");
    const BindResult r = RunBindPipeline(MulExp(), MulExpRequest());
    EXPECT_EQ(CountOps(r.graph, "_fused_pointwise"), 0u);
    EXPECT_EQ(r.fusion.groups, 0u);
  }
  {
    testing::ScopedEnv off("WEFT_ELIMINATE_COMMON_EXPR", "0");
    EXPECT_EQ(PassNames(RunBindPipeline(MulExp(), MulExpRequest()))[0], "gradient");
  }
  {
    testing::ScopedEnv off("WEFT_PLAN_MEMORY", "0");
    const BindResult r = RunBindPipeline(MulExp(), MulExpRequest());
    const MemoryPlan& plan = r.graph.memory();  // r keeps the plan alive
    EXPECT_EQ(plan.total_bytes, plan.naive_bytes) << "one buffer per entry";
  }
  testing::ScopedEnv bad("WEFT_PLAN_MEMORY", "sometimes");
  testing::ExpectErrorContains([] { RunBindPipeline(MulExp(), MulExpRequest()); },
                               {"WEFT_PLAN_MEMORY", "sometimes"});
}

TEST(BindPipeline, CallsTheCallersExtensionAndChecksAtTheirPlaces) {
  BindRequest request = MulExpRequest();
  std::vector<std::string> calls;
  request.extend = [&](const Graph& g, const std::vector<std::string>& grad_args) {
    calls.push_back("extend " + grad_args.at(0));
    EXPECT_FALSE(g.has_types());
    return g;
  };
  request.check_arguments = [&](const Graph& g, const std::vector<std::string>&) {
    calls.push_back("arguments");
    EXPECT_FALSE(g.has_types());
  };
  request.check_types = [&](const Graph& g, const std::vector<std::string>&) {
    calls.push_back("types");
    EXPECT_TRUE(g.has_types());
    EXPECT_EQ(CountOps(g, "_fused_pointwise"), 0u) << "before fusion";
  };
  RunBindPipeline(MulExp(), request);
  EXPECT_EQ(calls, (std::vector<std::string>{"extend w", "arguments", "types"}));
}

}  // namespace
}  // namespace weft
