// The CPU's lane chains (ops/cpu/internal/lane_chain.h): every unary functor, forward and backward,
// and every binary functor, evaluated on math::Lanes by RunLaneChain must give, element by
// element, the bits its float functor gives (the op's own loop, ops/cpu/unary.cc, computes those:
// ops_special_values_test), over full blocks and a partial one, stored, added and streamed, on NaN,
// infinities, signed zeros, denormals, the largest finite values and a sweep through every
// functor's branches; a chain carries its value from step to step, reads operands from memory,
// stores and adds where its steps say; the planner makes the benchmark's chain one chain that
// stores only its output and streams its input, the training chains store what the backward reads
// and nothing else, and a bias add with its GELU, or a dropout mask with its residual add, is one
// chain (the bias read from its gathered tile). (ops_fusion_test and ops_fusion_property_test
// compare whole fused groups with the unfused ops.)
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "graph/symbol.h"
#include "ops/cpu/internal/lane_chain.h"
#include "ops/fusion/fused_group.h"
#include "ops/fusion/internal/step_plan.h"
#include "ops/math/binary.h"
#include "ops/math/unary.h"
#include "passes/fuse_pointwise.h"
#include "passes/gradient.h"
#include "passes/infer.h"
#include "tests/fusion_test_util.h"

namespace weft::testing {
namespace {

using cpu::LaneFunctor;
using cpu::LaneStep;

// The special floats, then a sweep of [-25, 25] in steps of 0.53 (past SoftRelu's 20, through
// sigmoid's and tanh's saturation and relu's kink).
std::vector<float> Values() {
  using L = std::numeric_limits<float>;
  std::vector<float> v = {L::quiet_NaN(), L::infinity(),   -L::infinity(),   0.0f,
                          -0.0f,          L::denorm_min(), -L::denorm_min(), L::min(),
                          -L::min(),      L::max(),        L::lowest()};
  for (float x = -25; x <= 25; x += 0.53f) v.push_back(x);
  return v;
}

const std::vector<float> kScalars = {0.0f,
                                     -0.0f,
                                     1.5f,
                                     -2.0f,
                                     std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::quiet_NaN()};

// Equal bits, or both NaN (IEEE leaves a NaN's sign and payload open).
bool SameFloat(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}

// Runs `steps` over n elements from `src` and `others`, into `dsts` (their initial contents are
// what an adding step adds to).
void RunChain(const std::vector<LaneStep>& steps, const std::vector<float>& src,
              const std::vector<const std::vector<float>*>& others,
              std::vector<std::vector<float>>& dsts) {
  std::vector<const float*> o;
  std::vector<float*> d;
  for (const std::vector<float>* v : others) o.push_back(v->data());
  for (std::vector<float>& v : dsts) d.push_back(v.data());
  const float* ahead[] = {src.data()};
  cpu::RunLaneChain(steps, src.data(), o.data(), d.data(), ahead, 0,
                    static_cast<int64_t>(src.size()));
}

void ExpectSame(const std::vector<float>& got, const std::vector<float>& want,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int wrong = 0;
  for (size_t i = 0; i < got.size() && wrong < 5; ++i) {
    if (SameFloat(got[i], want[i])) continue;
    ++wrong;
    ADD_FAILURE() << what << " [" << i << "]: lanes give " << got[i] << ", the float functor "
                  << want[i];
  }
}

// F forward: x runs through every value, at every lane position (so full blocks and the partial
// last one both see each), for each scalar; stored, and added to a destination.
template <typename F>
void CheckForward(LaneFunctor functor, const std::string& name) {
  const std::vector<float> values = Values();
  std::vector<float> x;
  for (int shift = 0; shift < 5; ++shift) {
    for (size_t i = 0; i < values.size(); ++i) x.push_back(values[(i * 7 + shift) % values.size()]);
  }
  for (float s : kScalars) {
    for (int mode = 0; mode < 3; ++mode) {  // stored, added, streamed (non-temporal stores)
      const bool add = mode == 1;
      LaneStep step{functor};
      step.scalar = s, step.store = 0, step.add = add, step.stream = mode == 2;
      std::vector<std::vector<float>> dst = {std::vector<float>(x.size(), add ? 0.25f : -7.0f)};
      RunChain({step}, x, {}, dst);
      std::vector<float> want(x.size());
      for (size_t i = 0; i < x.size(); ++i)
        want[i] = add ? 0.25f + F::Fwd(x[i], s) : F::Fwd(x[i], s);
      ExpectSame(dst[0], want,
                 name + " forward, scalar " + std::to_string(s) + ", mode " + std::to_string(mode));
    }
  }
}

// F backward: every (dy, v) pair of values, dy carried, v read from memory (what Grad reads).
template <typename F>
void CheckBackward(LaneFunctor functor, const std::string& name) {
  const std::vector<float> values = Values();
  std::vector<float> dy, v;
  for (float a : values) {
    for (float b : values) dy.push_back(a), v.push_back(b);
  }
  for (float s : kScalars) {
    LaneStep step{functor};
    step.backward = true, step.scalar = s, step.store = 0, step.v = 0;
    std::vector<std::vector<float>> dst = {std::vector<float>(dy.size())};
    RunChain({step}, dy, {&v}, dst);
    std::vector<float> want(dy.size());
    for (size_t i = 0; i < dy.size(); ++i) want[i] = fn::BackwardOf<F>(dy[i], v[i], s);
    ExpectSame(dst[0], want, name + " backward, scalar " + std::to_string(s));
  }
}

TEST(LaneChain, EveryUnaryFunctorOnLanesGivesItsFloatBits) {
#define WEFT_CHECK_FUNCTOR(functor)                             \
  CheckForward<fn::functor>(LaneFunctor::k##functor, #functor); \
  CheckBackward<fn::functor>(LaneFunctor::k##functor, #functor);
#define WEFT_CHECK_OP_FUNCTOR(name, functor, description, has_scalar) WEFT_CHECK_FUNCTOR(functor)
  WEFT_UNARY_OPS(WEFT_CHECK_OP_FUNCTOR)
  WEFT_UNARY_EXTRA_FUNCTORS(WEFT_CHECK_FUNCTOR)
#undef WEFT_CHECK_OP_FUNCTOR
#undef WEFT_CHECK_FUNCTOR
}

// F(l, r) for every pair of values, the carried operand on either side (the other from memory).
template <typename F>
void CheckBinary(cpu::LaneBinary binary, const std::string& name) {
  const std::vector<float> values = Values();
  std::vector<float> l, r;
  for (float a : values) {
    for (float b : values) l.push_back(a), r.push_back(b);
  }
  for (bool carried_lhs : {true, false}) {
    LaneStep step{};
    step.binary = binary, step.store = 0;
    (carried_lhs ? step.y : step.x) = 0;
    std::vector<std::vector<float>> dst = {std::vector<float>(l.size())};
    RunChain({step}, carried_lhs ? l : r, {carried_lhs ? &r : &l}, dst);
    std::vector<float> want(l.size());
    for (size_t i = 0; i < l.size(); ++i) want[i] = F::Fwd(l[i], r[i]);
    ExpectSame(dst[0], want, name + (carried_lhs ? ", lhs carried" : ", rhs carried"));
  }
}

TEST(LaneChain, EveryBinaryFunctorOnLanesGivesItsFloatBits) {
#define WEFT_CHECK_BINARY(name, functor, description) \
  CheckBinary<fn::functor>(cpu::LaneBinary::k##functor, #functor);
  WEFT_BINARY_OPS(WEFT_CHECK_BINARY)
#undef WEFT_CHECK_BINARY
}

// y = sigmoid(relu(x) * 1.5), then dx = relu'(x) * (dy * 1.5) as a backward chain would, with
// relu(x) stored for a later reader, x and dy read from memory, and the sum added into dx.
TEST(LaneChain, AChainCarriesItsValueReadsOperandsAndStoresAsItsStepsSay) {
  const int64_t n = 3 * 64 + 29;
  std::vector<float> x(n), dy(n);
  for (int64_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(i % 23) * 0.37f - 4.0f, dy[i] = 1.0f - 0.01f * i;
  std::vector<LaneStep> steps(5);
  steps[0] = {LaneFunctor::kRelu};
  steps[0].store = 0;  // relu(x), read by someone after the chain
  steps[1] = {LaneFunctor::kMulScalar};
  steps[1].scalar = 1.5f;
  steps[2] = {LaneFunctor::kSigmoid};
  steps[2].store = 1;
  steps[3] = {LaneFunctor::kMulScalar};  // a new value: dy * 1.5, dy from memory
  steps[3].backward = true, steps[3].scalar = 1.5f, steps[3].x = 0;
  steps[4] = {LaneFunctor::kRelu};
  steps[4].backward = true, steps[4].v = 1, steps[4].store = 2, steps[4].add = true;  // v: x
  std::vector<std::vector<float>> dst = {std::vector<float>(n), std::vector<float>(n),
                                         std::vector<float>(n, 0.5f)};
  RunChain(steps, x, {&dy, &x}, dst);
  std::vector<float> relu(n), y(n), dx(n);
  for (int64_t i = 0; i < n; ++i) {
    relu[i] = fn::Relu::Fwd(x[i], 0.0f);
    y[i] = fn::Sigmoid::Fwd(fn::MulScalar::Fwd(relu[i], 1.5f), 0.0f);
    const float g = fn::BackwardOf<fn::MulScalar>(dy[i], dy[i], 1.5f);
    dx[i] = 0.5f + fn::BackwardOf<fn::Relu>(g, x[i], 0.0f);
  }
  ExpectSame(dst[0], relu, "relu(x)");
  ExpectSame(dst[1], y, "y");
  ExpectSame(dst[2], dx, "dx");
}

TEST(LaneChain, TheBenchmarksChainIsOneChainThatStoresOnlyItsOutput) {
  const Graph g =
      FusePointwise(InferShapesAndTypes(Chain(Var("x")).ToGraph(), {{"x", Shape{1000}}}));
  const std::vector<std::shared_ptr<const FusedGroup>> groups = FusedGroupsOf(g);
  ASSERT_EQ(groups.size(), 1u);
  const FusedGroup& group = *groups[0];
  const OpReq write = OpReq::kWrite;
  const StepPlan plan(group, Device::Cpu(), {&write, 1});
  const std::vector<cpu::LaneChain> chains = cpu::PlanLaneChains(group, plan);
  ASSERT_EQ(chains.size(), 1u);
  const cpu::LaneChain& chain = chains[0];
  EXPECT_EQ(chain.first, 0u);
  EXPECT_EQ(chain.end, group.steps.size());
  EXPECT_EQ(chain.src, 0u) << "the group's input";
  EXPECT_TRUE(chain.others.empty());
  EXPECT_EQ(chain.dsts, std::vector<uint32_t>{group.outputs[0]});
  EXPECT_EQ(chain.streamed, std::vector<uint32_t>{0});
  for (size_t k = 0; k + 1 < chain.steps.size(); ++k)
    EXPECT_EQ(chain.steps[k].store, -1) << "step " << k;
}

// The chains of a group under one request for all its outputs.
std::vector<cpu::LaneChain> ChainsOf(const FusedGroup& group, OpReq req) {
  const std::vector<OpReq> reqs(group.outputs.size(), req);
  return cpu::PlanLaneChains(group, StepPlan(group, Device::Cpu(), reqs));
}

// gelu(x + b), b of (C,) against x of (R, C): one chain of both steps, the bias read from the
// gathered tile of its broadcast use, x streamed, only y stored. r + x * m (a dropout's mask and
// the residual): one chain reading m and r from memory.
TEST(LaneChain, ABiasAddAndItsGeluAndAResidualAndItsMaskAreOneChainEach) {
  const Symbol x = Var("x"), b = Var("b");
  const Symbol gelu = Symbol::Op("gelu", {Symbol::Op("add", {x, b})}, {{"approximate", "tanh"}});
  const Symbol residual = Symbol::Op("add", {Var("r"), Symbol::Op("mul", {x, Var("m")})});
  const Shape rows{5, 40};
  for (const bool bias : {true, false}) {
    const Symbol& y = bias ? gelu : residual;
    const Graph g = FusePointwise(InferShapesAndTypes(
        y.ToGraph(), {{"x", rows}, {"b", Shape{40}}, {"r", rows}, {"m", rows}}));
    const std::vector<std::shared_ptr<const FusedGroup>> groups = FusedGroupsOf(g);
    ASSERT_EQ(groups.size(), 1u);
    const FusedGroup& group = *groups[0];
    const std::vector<cpu::LaneChain> chains = ChainsOf(group, OpReq::kWrite);
    ASSERT_EQ(chains.size(), 1u) << group.label;
    const cpu::LaneChain& chain = chains[0];
    EXPECT_EQ(chain.end - chain.first, 2u) << group.label;
    EXPECT_EQ(chain.steps[0].binary, bias ? cpu::LaneBinary::kAdd : cpu::LaneBinary::kMul);
    EXPECT_EQ(chain.dsts, std::vector<uint32_t>{group.outputs[0]});
    if (bias) {
      const OpReq write = OpReq::kWrite;
      ASSERT_EQ(StepPlan(group, Device::Cpu(), {&write, 1}).broadcast_uses().size(), 1u);
      ASSERT_EQ(chain.others.size(), 1u) << "the bias";
      EXPECT_EQ(chain.gathered[0], 0) << "read from its gathered tile";
      EXPECT_EQ(chain.streamed.size(), 1u) << "x alone";
    } else {
      EXPECT_EQ(chain.others.size(), 2u) << "m and r";
      EXPECT_EQ(chain.streamed.size(), 3u);
    }
  }
}

// Training on the CPU (no recomputing): the forward chain stores the values the backward reads
// (relu's input, sigmoid's output) beside y, and the backward chain reads them from memory, carries
// dy through its 8 steps and stores dx only, added into dx under kAddTo.
TEST(LaneChain, TheTrainingChainsStoreWhatTheBackwardReadsAndNothingElse) {
  Graph g = Chain(Var("x")).ToGraph();
  g = InferShapesAndTypes(Gradient(g, g.ArgumentNodes()), {{"x", Shape{1000}}});
  const std::vector<std::shared_ptr<const FusedGroup>> groups =
      FusedGroupsOf(FusePointwise(g, nullptr, false));
  ASSERT_EQ(groups.size(), 2u);
  const FusedGroup &forward = *groups[0], &backward = *groups[1];
  ASSERT_EQ(forward.outputs.size(), 3u);
  const std::vector<cpu::LaneChain> f = ChainsOf(forward, OpReq::kWrite);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].end - f[0].first, 8u);
  std::vector<uint32_t> stored = f[0].dsts, outputs = forward.outputs;
  std::sort(stored.begin(), stored.end());
  std::sort(outputs.begin(), outputs.end());
  EXPECT_EQ(stored, outputs) << "the chain stores exactly the group's outputs";

  for (OpReq req : {OpReq::kWrite, OpReq::kAddTo}) {
    const std::vector<cpu::LaneChain> b = ChainsOf(backward, req);
    ASSERT_EQ(b.size(), 1u) << backward.label;
    const cpu::LaneChain& chain = b[0];
    EXPECT_EQ(chain.end - chain.first, 8u);
    EXPECT_LT(chain.src, backward.num_inputs) << "dy, carried from the first step";
    EXPECT_EQ(chain.others.size(), 2u) << "relu's input and sigmoid's output";
    EXPECT_EQ(chain.streamed.size(), 3u) << "dy and those two, all inputs of the group";
    EXPECT_EQ(chain.dsts, std::vector<uint32_t>{backward.outputs[0]});
    for (size_t k = 0; k + 1 < chain.steps.size(); ++k)
      EXPECT_EQ(chain.steps[k].store, -1) << "step " << k;
    EXPECT_TRUE(chain.steps.back().backward);
    EXPECT_EQ(chain.steps.back().add, req == OpReq::kAddTo);
  }
}

}  // namespace
}  // namespace weft::testing
