// Pointwise fusion's generated kernels on gpu:0 (ops/gpu/fusion/fused_kernel.h), against the same
// graphs bound with fusion off (WEFT_USE_FUSION=0), value for value: the kernels call the unfused
// kernels' functors in the same float arithmetic, compiled like them without FMA contraction, so
// float32 results are equal, not merely close. Covered: the seed's XLNet pattern (CSE off, 144
// outputs) with its arguments by value and, with a small test-only budget, in a device table;
// 3,000 outputs (48 KB of pointers and scalars: the table); by-value arguments over 4 KB (launched
// directly); a compile failure (test-only bad code) falling back to the unfused steps with one
// warning; compiling at Bind, never in Forward, a second Bind compiling nothing and a fresh kernel
// library reading the disk cache; 64-bit indexing (forced by a test-only switch); 32-byte packs
// and, for an input that is an offset view, one element at a time.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/gpu/cuda_check.h"
#include "engine/engine.h"
#include "executor/executor.h"
#include "graph/symbol.h"
#include "ops/fusion/fused_group.h"
#include "ops/gpu/fusion/device_param_budget.h"
#include "ops/gpu/fusion/fused_kernel.h"
#include "ops/gpu/rtc/kernel_library.h"
#include "ops/invocation.h"
#include "passes/fuse_pointwise.h"
#include "passes/infer.h"
#include "storage/ndarray.h"
#include "tests/fusion_test_util.h"
#include "tests/weft_test_util.h"

namespace weft::gpu {
namespace {

const Device kGpu = Device::Gpu(0);

using testing::Chain;
using testing::Op1;
using testing::Scalar;
using testing::Var;

// relu(x) and then `n` add_scalar with distinct scalars, each an output.
Symbol ManyOutputs(int n) {
  const Symbol h = Op1("relu", Var("x"));
  std::vector<Symbol> outs;
  for (int k = 0; k < n; ++k) outs.push_back(Scalar("add_scalar", h, 0.001 * (k + 1)));
  return Symbol::Group(outs);
}

using weft::testing::ScopedEnv;

// x: n values in [-2, 2), on gpu:0.
NDArray Input(int64_t n, uint64_t seed = 1) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = static_cast<float>((i * 7919 + seed * 104729) % 4000) / 1000.0f - 2.0f;
  return NDArray::FromVector(v, Shape{n}, kGpu);
}

// Every output of `s` bound to `args` on gpu:0 and run forward once, fusion on or off.
std::vector<std::vector<float>> BindAndRun(const Symbol& s, const Executor::ArrayMap& args,
                                           bool fusion) {
  ScopedEnv env("WEFT_USE_FUSION", fusion ? "1" : "0");
  auto exec = Executor::Bind(s, kGpu, args);
  exec->Forward(/*is_train=*/false);
  std::vector<std::vector<float>> out;
  for (const NDArray& o : exec->outputs()) out.push_back(o.ToVector<float>());
  return out;
}

// Fused and unfused runs agree value for value (float32; FMA contraction off in both).
void ExpectFusedEqualsUnfused(const Symbol& s, const Executor::ArrayMap& args) {
  const std::vector<std::vector<float>> fused = BindAndRun(s, args, true),
                                        unfused = BindAndRun(s, args, false);
  ASSERT_EQ(fused.size(), unfused.size());
  for (size_t o = 0; o < fused.size(); ++o) {
    ASSERT_EQ(fused[o].size(), unfused[o].size()) << "output " << o;
    for (size_t i = 0; i < fused[o].size(); ++i)
      ASSERT_EQ(fused[o][i], unfused[o][i]) << "output " << o << "[" << i << "]";
  }
}

FusedGpuStats StatsNow() { return GetFusedGpuStats(); }

TEST(FusedGpu, ReportsTheParameterBudgetItAsked) {
  const ParamBudgetFacts f = QueryParamBudgetFacts(0);
  std::cout << "parameter budget on gpu:0: " << DescribeParamBudget(0) << std::endl;
  RecordProperty("param_budget", DescribeParamBudget(0));
  const bool large = f.runtime >= 12010 && f.driver >= 12010 && f.nvrtc >= 12010 && f.arch >= 70;
  EXPECT_EQ(KernelParamBudget(0), large ? 32764u : 4096u);
}

TEST(FusedGpu, TheSeedsXLNetPatternRunsWithItsArgumentsByValue) {
  ScopedEnv no_cse("WEFT_ELIMINATE_COMMON_EXPR", "0");
  const FusedGpuStats before = StatsNow();
  ExpectFusedEqualsUnfused(testing::XLNetPattern(Var("x")),
                           {{"x", Input(512).Reshape(Shape{32, 16})}});
  const FusedGpuStats after = StatsNow();
  EXPECT_EQ(after.kernels - before.kernels, 1);  // one group of 144 outputs: 1,168 bytes
  EXPECT_EQ(after.tables, before.tables);
  EXPECT_EQ(after.fallbacks, before.fallbacks);
}

TEST(FusedGpu, TheSeedsXLNetPatternRunsWithItsArgumentsInATable) {
  ScopedEnv no_cse("WEFT_ELIMINATE_COMMON_EXPR", "0");
  ScopedEnv small("WEFT_FUSION_TEST_PARAM_BUDGET", "256");
  const FusedGpuStats before = StatsNow();
  ExpectFusedEqualsUnfused(testing::XLNetPattern(Var("x")),
                           {{"x", Input(512).Reshape(Shape{32, 16})}});
  const FusedGpuStats after = StatsNow();
  EXPECT_EQ(after.kernels - before.kernels, 1);
  EXPECT_EQ(after.tables - before.tables, 1);
}

TEST(FusedGpu, ThreeThousandOutputsRunWithTheirArgumentsInATable) {
  const FusedGpuStats before = StatsNow();
  ExpectFusedEqualsUnfused(ManyOutputs(3000),
                           {{"x", Input(1000)}});  // 48 KB of pointers and scalars
  const FusedGpuStats after = StatsNow();
  EXPECT_EQ(after.kernels - before.kernels, 1);
  EXPECT_EQ(after.tables - before.tables, 1);
  EXPECT_EQ(after.fallbacks, before.fallbacks);
}

// 400 outputs: 6.4 KB by value (over 4 KB, within 32,764 bytes): launched directly, not batched.
TEST(FusedGpu, ArgumentsByValueOverFourKilobytesAreLaunchedDirectly) {
  if (KernelParamBudget(0) < 8192) GTEST_SKIP() << "parameter budget " << DescribeParamBudget(0);
  const FusedGpuStats before = StatsNow();
  ExpectFusedEqualsUnfused(ManyOutputs(400), {{"x", Input(3001)}});
  const FusedGpuStats after = StatsNow();
  EXPECT_EQ(after.kernels - before.kernels, 1);
  EXPECT_EQ(after.direct - before.direct, 1);
  EXPECT_EQ(after.tables, before.tables);
}

// Every group compiles and runs (no fallback, arguments by value: ops_fusion_block_test checks
// the plans against both budgets on any machine), and the step equals the unfused one's within
// 1e-6 of 1 + |unfused|, not bit for bit as this file's forward graphs: a training step's
// reductions (bias and LayerNorm gradients, Attention's backward) are not known to sum in one
// order from run to run on a GPU.
TEST(FusedGpu, XLNetBlocksTrainFusedAsUnfused) {
  for (bool gelu_tanh : {true, false}) {
    const testing::XLNetBlockConfig c{.layers = 12, .gelu_tanh = gelu_tanh};
    const FusedGpuStats before = StatsNow();
    const std::vector<std::vector<float>> fused = testing::RunXLNetBlocks(c, kGpu, true),
                                          unfused = testing::RunXLNetBlocks(c, kGpu, false);
    const FusedGpuStats after = StatsNow();
    EXPECT_GT(after.kernels - before.kernels, 12);
    EXPECT_EQ(after.fallbacks, before.fallbacks);
    EXPECT_EQ(after.tables, before.tables);
    ASSERT_EQ(fused.size(), unfused.size());
    for (size_t k = 0; k < fused.size(); ++k) {
      ASSERT_EQ(fused[k].size(), unfused[k].size());
      for (size_t i = 0; i < fused[k].size(); ++i) {
        ASSERT_NEAR(fused[k][i], unfused[k][i], 1e-6 * (1 + std::abs(unfused[k][i])))
            << "value " << k << "[" << i << "]";
      }
    }
  }
}

int Count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(FusedGpu, AGroupThatDoesNotCompileRunsUnfusedAfterOneWarning) {
  ScopedEnv bad("WEFT_FUSION_TEST_BAD_CODE", "1");
  const Symbol s = Op1("exp", Op1("tanh", Chain(Var("x"))));
  const Executor::ArrayMap args = {{"x", Input(2000)}};
  const FusedGpuStats before = StatsNow();
  ::testing::internal::CaptureStderr();
  std::vector<std::vector<float>> fused;
  {
    ScopedEnv on("WEFT_USE_FUSION", "1");
    auto exec = Executor::Bind(s, kGpu, args);
    for (int run = 0; run < 3; ++run) exec->Forward(false);
    fused = {exec->outputs()[0].ToVector<float>()};
    auto again = Executor::Bind(s, kGpu, args);  // the same group again: no second warning
    again->Forward(false);
    again->outputs()[0].WaitToRead();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(StatsNow().fallbacks - before.fallbacks, 2);  // both binds run it unfused
  EXPECT_EQ(Count(err, "weft: warning: fused("), 1) << err;
  EXPECT_EQ(Count(err, "runs unfused"), 1) << err;
  EXPECT_NE(err.find("WEFT_FUSION_TEST_BAD_CODE"), std::string::npos)
      << err;  // the reason: NVRTC's log
  const std::vector<std::vector<float>> unfused = BindAndRun(s, args, false);
  ASSERT_EQ(fused[0].size(), unfused[0].size());
  for (size_t i = 0; i < fused[0].size(); ++i) ASSERT_EQ(fused[0][i], unfused[0][i]) << i;
}

// A graph whose only node is the fused one (no gradient), with a structure no other test has,
// so its kernel is compiled by this test's first Bind.
TEST(FusedGpu, TheKernelIsCompiledAtBindAndASecondBindCompilesNothing) {
  ScopedEnv on("WEFT_USE_FUSION", "1");
  const Symbol s = Scalar(
      "rdiv_scalar", Op1("softrelu", Scalar("minimum_scalar", Op1("neg", Var("x")), 0.3)), 2.0);
  const Executor::ArrayMap args = {{"x", Input(5000)}};
  rtc::KernelLibrary& library = rtc::KernelLibrary::Global();
  const rtc::KernelLibrary::Stats start = library.stats();
  auto exec = Executor::Bind(s, kGpu, args);
  const rtc::KernelLibrary::Stats bound = library.stats();
  EXPECT_EQ(bound.compiles + bound.disk_hits - start.compiles - start.disk_hits, 1);
  exec->Forward(false);
  exec->Forward(false);
  exec->outputs()[0].WaitToRead();
  EXPECT_EQ(library.stats().compiles, bound.compiles);  // Forward compiled nothing
  auto again = Executor::Bind(s, kGpu, args);
  const rtc::KernelLibrary::Stats rebound = library.stats();
  EXPECT_EQ(rebound.compiles, bound.compiles);
  EXPECT_EQ(rebound.disk_hits, bound.disk_hits);
  EXPECT_GE(rebound.memory_hits, bound.memory_hits + 1);
}

// The fused node of a graph, typed for `shapes`.
Node FusedNode(const Symbol& s, const std::map<std::string, Shape>& shapes) {
  const Graph g = FusePointwise(InferShapesAndTypes(s.ToGraph(), shapes));
  for (const Node& n : g.nodes()) {
    if (!n.is_variable() && n.op->name == "_fused_pointwise") return n;
  }
  ADD_FAILURE() << "no fused node";
  return Node();
}

// y = compute(x) on gpu:0, as an engine op writing y.
std::vector<float> RunPrepared(const ComputeFn& compute, const Node& node, const NDArray& x,
                               const NDArray& y) {
  Invocation call(*node.op, node.attrs, kGpu);
  call.AddInput(x.View(), x.var());
  call.AddOutput(y.View(), y.var(), OpReq::kWrite);
  engine::Engine::Get()->PushSync(
      [&](engine::RunContext run) {
        OpContext ctx;
        ctx.run = run;
        compute(ctx, node.attrs, call.inputs(), call.req(), call.outputs());
      },
      kGpu, call.reads(), call.writes());
  return y.ToVector<float>();
}

TEST(FusedGpu, AFreshKernelLibraryReadsTheKernelFromTheDiskCache) {
  const std::string dir = weft::testing::TempPath("fused_rtc_cache");
  std::filesystem::remove_all(dir);
  const Node node = FusedNode(Chain(Var("x")), {{"x", Shape{4096}}});
  const std::shared_ptr<const FusedGroup> group = node.attrs.Get<FusedParam>().group;
  const NDArray x = Input(4096), y(Shape{4096}, kGpu), z(Shape{4096}, kGpu);
  const OpReq write = OpReq::kWrite;
  const TensorView in = x.View(), out_y = y.View(), out_z = z.View();
  std::vector<float> first, second;
  {
    rtc::KernelLibrary writer(dir);
    first = RunPrepared(
        PrepareFusedGpu(group, kGpu, {&in, 1}, {&write, 1}, {&out_y, 1}, writer, true), node, x, y);
    EXPECT_EQ(writer.stats().compiles, 1);
    EXPECT_EQ(writer.stats().disk_writes, 1);
  }
  {
    rtc::KernelLibrary reader(dir);
    second = RunPrepared(
        PrepareFusedGpu(group, kGpu, {&in, 1}, {&write, 1}, {&out_z, 1}, reader, true), node, x, z);
    EXPECT_EQ(reader.stats().compiles, 0);
    EXPECT_EQ(reader.stats().disk_hits, 1);
  }
  EXPECT_EQ(first, second);
  EXPECT_EQ(first, BindAndRun(Chain(Var("x")), {{"x", x}}, false)[0]);
}

TEST(FusedGpu, SixtyFourBitIndexingComputesTheSame) {
  ScopedEnv wide("WEFT_FUSION_TEST_INDEX64", "1");
  const FusedGpuStats before = StatsNow();
  ExpectFusedEqualsUnfused(Chain(Var("x")), {{"x", Input(10001)}});
  EXPECT_EQ(StatsNow().index64 - before.index64, 1);
}

// 1,003 elements: 125 packs of 8 floats and a tail of 3.
TEST(FusedGpu, AlignedTensorsGoInThirtyTwoBytePacksWithAScalarTail) {
  const FusedGpuStats before = StatsNow();
  ExpectFusedEqualsUnfused(Chain(Var("x")), {{"x", Input(1003)}});
  const FusedGpuStats after = StatsNow();
  EXPECT_EQ(after.kernels - before.kernels, 1);
  EXPECT_EQ(after.vectorized - before.vectorized, 1);
}

// x starts 4 bytes, then 16 bytes, into its memory: no pack of 32 bytes is aligned, so one
// element at a time.
TEST(FusedGpu, AnOffsetViewIsReadOneElementAtATime) {
  const NDArray backing = Input(1025);
  for (const int64_t offset : {1, 4}) {
    const NDArray x = backing.Slice(offset, 1025);
    const FusedGpuStats before = StatsNow();
    ExpectFusedEqualsUnfused(Chain(Var("x")), {{"x", x}});
    const FusedGpuStats after = StatsNow();
    EXPECT_EQ(after.kernels - before.kernels, 1) << "offset " << offset;
    EXPECT_EQ(after.vectorized, before.vectorized) << "offset " << offset;
  }
}

}  // namespace
}  // namespace weft::gpu
