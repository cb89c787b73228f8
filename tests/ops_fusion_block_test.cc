// Pointwise fusion in a real model (issue 39): the seed's pattern, XLNet's masks and position terms
// built from long expand_dims chains into pointwise ops of many inputs, inside transformer blocks
// (tests/fusion_test_util.h, XLNetBlocks), with CSE off as the seed had it. The blocks bind, fusion
// forms groups (the mask's, bias + GELU in both forms, the residual's gradient through Dropout's
// mask), every fused group of the bound graph fits the GPU fused kernel's parameter budget under
// the rule its code generator applies (ops/gpu/fusion/param_budget.h, built without CUDA too),
// and fused outputs and gradients equal the unfused graph's bit for bit (the CPU runs each step's
// own compute). The same blocks on a GPU: tests/gpu_fusion_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "executor/executor.h"
#include "ops/fusion/fused_group.h"
#include "ops/gpu/fusion/kernel_plan.h"
#include "ops/gpu/fusion/param_budget.h"
#include "passes/fuse_pointwise.h"
#include "passes/pipeline.h"
#include "storage/ndarray.h"
#include "tests/fusion_test_util.h"
#include "tests/weft_test_util.h"

namespace weft::testing {
namespace {

// The bind pipeline's graph for the blocks' training step (every parameter's gradient), with
// fusion as the CPU binds it; *typed gets the typed graph before fusion.
BindResult BindBlocks(const XLNetBlockConfig& c, Graph* typed) {
  const Graph g = XLNetBlocks(c).ToGraph();
  BindRequest request;
  request.device = Device::Cpu();
  request.shapes = XLNetBlockShapes(c);
  for (const auto& [name, shape] : request.shapes) {
    if (!IsXLNetBlockData(name)) request.differentiate.insert(name);
  }
  BindResult bound = RunBindPipeline(g, request);
  for (const BindResult::Pass& p : bound.passes) {
    if (std::string(p.name) == "infer_shapes_and_types") *typed = p.graph;
  }
  return bound;
}

// The ops of a group's steps, as a set of names.
std::set<std::string> StepOps(const FusedGroup& g) {
  std::set<std::string> ops;
  for (const FusedGroup::Step& s : g.steps) ops.insert(s.op->name);
  return ops;
}

bool HasGroupWith(const std::vector<std::shared_ptr<const FusedGroup>>& groups,
                  const std::set<std::string>& ops, bool backward) {
  return std::any_of(groups.begin(), groups.end(), [&](const auto& g) {
    const std::set<std::string> have = StepOps(*g);
    return g->backward == backward &&
           std::includes(have.begin(), have.end(), ops.begin(), ops.end());
  });
}

int BroadcastInputs(const FusedGroup& g) {
  const std::vector<FusedGroup::InputKind> kinds = g.InputKinds();
  return static_cast<int>(
      std::count(kinds.begin(), kinds.end(), FusedGroup::InputKind::kBroadcast));
}

// Every fused group of the graph, under both budgets (before CUDA 12.1 and after), for its
// outputs written and added to, with 32- and 64-bit indexing: what the launch passes fits, and the
// arguments go by value exactly when they fit.
void ExpectWithinParamBudgets(const std::vector<std::shared_ptr<const FusedGroup>>& groups) {
  const size_t small = gpu::ParamBudgetFor({12000, 12000, 12000, 90}),
               large = gpu::ParamBudgetFor({13000, 13000, 13000, 90});
  ASSERT_EQ(small, gpu::kSmallParamBudget);
  ASSERT_EQ(large, gpu::kLargeParamBudget);
  uint32_t most = 0;
  for (const auto& g : groups) {
    for (OpReq req : {OpReq::kWrite, OpReq::kAddTo}) {
      for (bool index64 : {false, true}) {
        const gpu::KernelPlan plan =
            gpu::PlanKernel(*g, std::vector<OpReq>(g->outputs.size(), req), index64);
        most = std::max(most, plan.bytes);
        // Pointers, scalars and broadcast walks only (no shape per output, as MXNet passed):
        // by value even under the budget before CUDA 12.1, where XLNet's 4,648 bytes overflowed.
        EXPECT_LE(plan.bytes, small) << g->label;
        for (size_t budget : {small, large}) {
          const gpu::ParamPlacement p = gpu::PlaceParams(plan.bytes, budget);
          EXPECT_LE(p.param_bytes, budget) << g->label;
          EXPECT_EQ(p.table, plan.bytes > budget) << g->label;
        }
      }
    }
  }
  std::cout << groups.size() << " groups, the largest argument struct " << most << " bytes"
            << std::endl;
}

TEST(XLNetBlocks, BindFuseAndFitTheGpuParamBudget) {
  ScopedEnv no_cse("WEFT_ELIMINATE_COMMON_EXPR", "0");
  for (bool gelu_tanh : {true, false}) {
    const XLNetBlockConfig c{.layers = 12, .gelu_tanh = gelu_tanh};  // XLNet-base's 12 layers
    Graph typed;
    const BindResult bound = BindBlocks(c, &typed);
    const auto groups = FusedGroupsOf(bound.graph);
    ASSERT_GE(groups.size(), 4u);
    // Each layer's mask: the padding, causal and segment terms and the distance bias, each from an
    // expand_dims chain, meet in one group of (B, H, T, T) reading at least 3 broadcast inputs.
    int mask_groups = 0;
    for (const auto& g : groups) mask_groups += !g->backward && BroadcastInputs(*g) >= 3;
    EXPECT_GE(mask_groups, c.layers) << "CSE is off: every layer keeps its own mask";
    // The seed's group: the mask terms, computed once, and every layer's expand_dims chains.
    size_t most_outputs = 0;
    for (const auto& g : groups) most_outputs = std::max(most_outputs, g->outputs.size());
    EXPECT_GE(most_outputs, static_cast<size_t>(c.layers));
    EXPECT_TRUE(HasGroupWith(groups, {"add", "gelu"}, false)) << "bias + GELU";
    ExpectWithinParamBudgets(groups);
    // As a GPU binds it: backward groups recompute cheap forward values (passes/fuse_pointwise.h).
    ExpectWithinParamBudgets(FusedGroupsOf(FusePointwise(typed, nullptr, /*recompute=*/true)));
  }
}

TEST(XLNetBlocks, FusedOutputsAndGradientsEqualUnfused) {
  for (bool gelu_tanh : {true, false}) {
    const XLNetBlockConfig c{.gelu_tanh = gelu_tanh};
    const std::vector<std::vector<float>> fused = RunXLNetBlocks(c, Device::Cpu(), true),
                                          unfused = RunXLNetBlocks(c, Device::Cpu(), false);
    ASSERT_EQ(fused.size(), unfused.size());
    for (size_t k = 0; k < fused.size(); ++k) {
      ASSERT_EQ(fused[k].size(), unfused[k].size());
      for (size_t i = 0; i < fused[k].size(); ++i)
        ASSERT_EQ(fused[k][i], unfused[k][i]) << "value " << k << "[" << i << "]";
    }
    float scale = 0;
    for (const std::vector<float>& v : unfused) {
      for (float x : v) scale = std::max(scale, std::abs(x));
    }
    EXPECT_GT(scale, 0.0f) << "the gradients are not all zero";
  }
}

}  // namespace
}  // namespace weft::testing
