// The training pass that drops a `_backward_add` whose operands have its output gradient's shape
// (passes/pass_gradients_through.h): residual blocks' gradients are bit for bit the same without
// it, the memory plan is smaller (the adds' operands are no longer kept for the backward), a
// broadcast add keeps its backward node, and the switch turns the pass off.
#include "passes/pass_gradients_through.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "passes/pipeline.h"
#include "tests/pass_test_util.h"
#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::BindCpu;

Symbol Conv(Symbol x, const std::string& name, int filters) {
  return Symbol::Op(
      "Convolution", {x},
      {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"num_filter", std::to_string(filters)}}, name);
}

// Two residual blocks relu(conv(relu(conv(x))) + x) after a stem, summed to a scalar loss.
Symbol ResidualLoss() {
  Symbol x = Symbol::Op("relu", {Conv(Symbol::Variable("data"), "stem", 8)});
  for (const char* name : {"b1", "b2"}) {
    const Symbol a = Symbol::Op("relu", {Conv(x, std::string(name) + "_a", 8)});
    x = Symbol::Op("relu", {Symbol::Op("add", {Conv(a, std::string(name) + "_b", 8), x})});
  }
  return Symbol::Op("sum", {x}, {}, "loss");
}

const Shape kData{4, 3, 8, 8};

struct Step {
  std::map<std::string, std::vector<float>> grads;
  size_t plan_bytes = 0;
};

// One forward and backward of ResidualLoss on `args`, with the pass on or off.
Step StepWith(const Executor::ArrayMap& args, bool pass) {
  testing::ScopedEnv env("WEFT_PASS_GRADIENTS_THROUGH", pass ? "1" : "0");
  Executor::ArrayMap grads;
  std::map<std::string, GradReq> reqs;
  for (const auto& [name, array] : args) {
    if (name == "data") continue;
    grads[name] = NDArray(array.shape(), Device::Cpu());
    reqs[name] = GradReq::kWrite;
  }
  auto exec = Executor::Bind(ResidualLoss(), Device::Cpu(), args, grads, reqs);
  exec->Forward(true);
  exec->Backward();
  Step s;
  for (const auto& [name, array] : exec->arg_grads()) s.grads[name] = array.ToVector<float>();
  s.plan_bytes = exec->stats().plan_bytes;
  return s;
}

TEST(PassGradientsThrough, ResidualGradientsAreTheSameAndThePlanSmaller) {
  const Executor::ArrayMap args = testing::RandomArguments(ResidualLoss(), {{"data", kData}});
  const Step on = StepWith(args, true), off = StepWith(args, false);
  EXPECT_EQ(on.grads, off.grads);
  EXPECT_EQ(on.grads.size(), 10u);  // the five convolutions' weights and biases
  EXPECT_LT(on.plan_bytes, off.plan_bytes);
}

TEST(PassGradientsThrough, DropsOnlyAddsWithNothingBroadcast) {
  const std::set<std::string> wrt = {"stem_weight"};
  EXPECT_EQ(BindCpu(ResidualLoss(), kData, wrt).gradients_passed_through, 2);
  // x + b with b (8, 1, 1): b's gradient sums over the broadcast axes, so the node stays
  const Symbol broadcast = Symbol::Op(
      "sum", {Symbol::Op("add", {Conv(Symbol::Variable("data"), "c", 8), Symbol::Variable("b")})});
  BindRequest request;
  request.device = Device::Cpu();
  request.shapes = {{"data", kData}, {"b", Shape{8, 1, 1}}};
  request.differentiate = {"b", "c_weight"};
  const BindResult bound = RunBindPipeline(broadcast.ToGraph(), request);
  EXPECT_EQ(bound.gradients_passed_through, 0);
  EXPECT_EQ(testing::CountOps(bound.graph, "_backward_add"), 1u);
  // inference binds have no gradient to pass
  EXPECT_EQ(BindCpu(ResidualLoss(), kData).gradients_passed_through, 0);
  testing::ScopedEnv off("WEFT_PASS_GRADIENTS_THROUGH", "0");
  EXPECT_EQ(BindCpu(ResidualLoss(), kData, wrt).gradients_passed_through, 0);
}

}  // namespace
}  // namespace weft
