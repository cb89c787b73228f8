// executor/: a bound graph computes what the imperative ops compute, its gradients match finite
// differences, gradient requests (write, add, null) do what they say, binding errors name the
// argument, and memory planning changes no result.
#include <gtest/gtest.h>

#include "tests/weft_test_util.h"

#include <cmath>
#include <random>

#include "core/error.h"
#include "executor/executor.h"
#include "graph/symbol.h"
#include "passes/infer.h"
#include "storage/ndarray.h"
#include "weft/imperative.h"

namespace weft {
namespace {

// loss = sum(tanh(x * w + b)^2), x (4, 3), w (3,), b (4, 1): broadcasting both ways.
Symbol Loss() {
  Symbol x = Symbol::Variable("x"), w = Symbol::Variable("w"), b = Symbol::Variable("b");
  Symbol h = Symbol::Op("tanh", {Symbol::Op("add", {Symbol::Op("mul", {x, w}), b})});
  return Symbol::Op("sum", {Symbol::Op("square", {h})});
}

std::map<std::string, Shape> kShapes = {{"x", Shape{4, 3}}, {"w", Shape{3}}, {"b", Shape{4, 1}}};

std::map<std::string, std::vector<double>> RandomValues(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::map<std::string, std::vector<double>> values;
  for (const auto& [name, shape] : kShapes) {
    for (int64_t i = 0; i < shape.Size(); ++i) values[name].push_back(u(rng));
  }
  return values;
}

Executor::ArrayMap Arrays(const std::map<std::string, std::vector<double>>& values) {
  Executor::ArrayMap arrays;
  for (const auto& [name, v] : values) arrays[name] = NDArray::FromVector(v, kShapes.at(name));
  return arrays;
}

Executor::ArrayMap ZeroGrads(double fill = 0) {
  Executor::ArrayMap grads;
  for (const auto& [name, shape] : kShapes) {
    grads[name] = NDArray(shape, Device::Cpu(), DType::kFloat64);
    grads[name].Fill(fill);
  }
  return grads;
}

std::map<std::string, GradReq> AllReqs(GradReq r) { return {{"x", r}, {"w", r}, {"b", r}}; }

double LossValue(const std::map<std::string, std::vector<double>>& values) {
  auto exec = Executor::Bind(Loss(), Device::Cpu(), Arrays(values));
  exec->Forward(false);
  return exec->outputs()[0].ToVector<double>()[0];
}

TEST(Executor, GradientsMatchFiniteDifferences) {
  auto values = RandomValues(1);
  Executor::ArrayMap grads = ZeroGrads();
  auto exec = Executor::Bind(Loss(), Device::Cpu(), Arrays(values), grads, AllReqs(GradReq::kWrite));
  exec->Forward(true);
  exec->Backward();
  EXPECT_NEAR(exec->outputs()[0].ToVector<double>()[0], LossValue(values), 1e-12);
  for (const auto& [name, shape] : kShapes) {
    std::vector<double> analytic = grads[name].ToVector<double>();
    for (int64_t i = 0; i < shape.Size(); ++i) {
      auto plus = values, minus = values;
      plus[name][i] += 1e-6;
      minus[name][i] -= 1e-6;
      const double numeric = (LossValue(plus) - LossValue(minus)) / 2e-6;
      EXPECT_NEAR(analytic[i], numeric, 1e-6 * (1 + std::abs(numeric))) << name << "[" << i << "]";
    }
  }
}

TEST(Executor, GradientsMatchTheImperativeOps) {
  auto values = RandomValues(2);
  Executor::ArrayMap args = Arrays(values), grads = ZeroGrads();
  auto exec = Executor::Bind(Loss(), Device::Cpu(), args, grads, AllReqs(GradReq::kWrite));
  exec->Forward(true);
  exec->Backward();
  // The same chain, op by op, differentiated by each op's rule in reverse.
  const NDArray &x = args["x"], &w = args["w"], &b = args["b"];
  NDArray xw = Invoke("mul", {x, w})[0], pre = Invoke("add", {xw, b})[0], h = Invoke("tanh", {pre})[0];
  NDArray sq = Invoke("square", {h})[0];
  NDArray ones(Shape{}, Device::Cpu(), DType::kFloat64);
  ones.Fill(1);
  auto back = [](const char* op, std::vector<NDArray> in, std::vector<NDArray> out, NDArray dy) {
    std::vector<NDArray> grads;
    for (const NDArray& a : in) grads.emplace_back(a.shape(), Device::Cpu(), DType::kFloat64);
    const Op& def = GetOp(op);
    InvokeBackward(def, ParseAttrs(def, {}), in, out, {dy}, grads, std::vector<OpReq>(in.size(), OpReq::kWrite));
    return grads;
  };
  NDArray d_sq = back("sum", {sq}, {Invoke("sum", {sq})[0]}, ones)[0];
  NDArray d_h = back("square", {h}, {sq}, d_sq)[0];
  NDArray d_pre = back("tanh", {pre}, {h}, d_h)[0];
  std::vector<NDArray> d_add = back("add", {xw, b}, {pre}, d_pre);
  std::vector<NDArray> d_mul = back("mul", {x, w}, {xw}, d_add[0]);
  auto expect_equal = [](const NDArray& a, const NDArray& b, const char* what) {
    std::vector<double> va = a.ToVector<double>(), vb = b.ToVector<double>();
    ASSERT_EQ(va.size(), vb.size()) << what;
    for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], 1e-12) << what << "[" << i << "]";
  };
  expect_equal(grads["x"], d_mul[0], "x");
  expect_equal(grads["w"], d_mul[1], "w");
  expect_equal(grads["b"], d_add[1], "b");
}

TEST(Executor, AddRequestAccumulatesAcrossBackwardCalls) {
  auto values = RandomValues(3);
  Executor::ArrayMap written = ZeroGrads(), accumulated = ZeroGrads(0.25);
  auto once = Executor::Bind(Loss(), Device::Cpu(), Arrays(values), written, AllReqs(GradReq::kWrite));
  once->Forward(true);
  once->Backward();
  auto twice = Executor::Bind(Loss(), Device::Cpu(), Arrays(values), accumulated, AllReqs(GradReq::kAdd));
  for (int i = 0; i < 2; ++i) {
    twice->Forward(true);
    twice->Backward();
  }
  for (const auto& [name, shape] : kShapes) {
    std::vector<double> one = written[name].ToVector<double>(), two = accumulated[name].ToVector<double>();
    for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(two[i], 0.25 + 2 * one[i], 1e-12) << name;
  }
}

TEST(Executor, NullRequestSkipsTheWorkOnlyItNeeds) {
  auto values = RandomValues(4);
  auto all = Executor::Bind(Loss(), Device::Cpu(), Arrays(values), ZeroGrads(), AllReqs(GradReq::kWrite));
  Executor::ArrayMap grads = ZeroGrads(7);
  auto only_b = Executor::Bind(Loss(), Device::Cpu(), Arrays(values), grads,
                               {{"x", GradReq::kNull}, {"w", GradReq::kNull}, {"b", GradReq::kWrite}});
  EXPECT_LT(only_b->stats().backward_nodes, all->stats().backward_nodes) << "mul's backward is not needed for b";
  only_b->Forward(true);
  only_b->Backward();
  EXPECT_EQ(grads["x"].ToVector<double>(), std::vector<double>(12, 7.0)) << "a null gradient is not written";
  all->Forward(true);
  all->Backward();
  EXPECT_EQ(grads["b"].ToVector<double>(), all->arg_grads().at("b").ToVector<double>());
}

TEST(Executor, MemoryPlanningChangesNoResult) {
  auto values = RandomValues(5);
  std::vector<double> results[2];
  for (int planned = 0; planned < 2; ++planned) {
    setenv("WEFT_PLAN_MEMORY", planned ? "1" : "0", 1);
    Executor::ArrayMap grads = ZeroGrads();
    auto exec = Executor::Bind(Loss(), Device::Cpu(), Arrays(values), grads, AllReqs(GradReq::kWrite));
    exec->Forward(true);
    exec->Backward();
    results[planned] = exec->outputs()[0].ToVector<double>();
    for (const char* name : {"x", "w", "b"}) {
      std::vector<double> g = grads[name].ToVector<double>();
      results[planned].insert(results[planned].end(), g.begin(), g.end());
    }
    if (planned) EXPECT_LT(exec->stats().plan_bytes, exec->stats().naive_bytes);
  }
  unsetenv("WEFT_PLAN_MEMORY");
  EXPECT_EQ(results[0], results[1]);
}

TEST(Executor, NullRequestPushesFewerEngineOps) {
  setenv("WEFT_EXEC_BULK_SIZE", "1", 1);  // one engine op per node, so ops count nodes run
  auto values = RandomValues(7);
  auto all = Executor::Bind(Loss(), Device::Cpu(), Arrays(values), ZeroGrads(), AllReqs(GradReq::kWrite));
  auto only_b = Executor::Bind(Loss(), Device::Cpu(), Arrays(values), ZeroGrads(),
                               {{"x", GradReq::kNull}, {"w", GradReq::kNull}, {"b", GradReq::kWrite}});
  unsetenv("WEFT_EXEC_BULK_SIZE");
  all->Forward(true);
  all->Backward();
  const size_t all_ops = all->stats().engine_ops_pushed;
  only_b->Forward(true);
  only_b->Backward();
  EXPECT_EQ(all_ops, all->stats().backward_nodes);
  EXPECT_LT(only_b->stats().engine_ops_pushed, all_ops);
}

TEST(Executor, MemoryPlanOfAnMlpTrainingGraphIsSmallerThanNaive) {
  Symbol h = Symbol::Variable("data");
  for (int i = 1; i <= 3; ++i) {
    h = Symbol::Op("FullyConnected", {h}, {{"num_hidden", "64"}}, "fc" + std::to_string(i));
    if (i < 3) h = Symbol::Op("relu", {h});
  }
  Symbol loss = Symbol::Op("SoftmaxCrossEntropy", {h, Symbol::Variable("label")});
  auto shapes = InferArgumentShapes(loss.ToGraph(), {{"data", Shape{32, 20}}, {"label", Shape{32}}});
  Executor::ArrayMap args, grads;
  std::map<std::string, GradReq> reqs;
  for (const auto& [name, shape] : shapes) {
    args[name] = NDArray(shape);
    args[name].Fill(name == "label" ? 1 : 0.1);
    if (name == "data" || name == "label") continue;
    grads[name] = NDArray(shape);
    reqs[name] = GradReq::kWrite;
  }
  auto exec = Executor::Bind(loss, Device::Cpu(), args, grads, reqs);
  EXPECT_GT(exec->stats().naive_bytes, 0u);
  EXPECT_LT(exec->stats().plan_bytes, exec->stats().naive_bytes);
  exec->Forward(true);
  exec->Backward();
  EXPECT_TRUE(std::isfinite(grads["fc1_weight"].ToVector<float>()[0]));
}

TEST(Executor, BindingErrorsNameTheArgument) {
  const auto message = testing::ErrorMessage;
  Executor::ArrayMap args = Arrays(RandomValues(6));
  Executor::ArrayMap missing = args;
  missing.erase("w");
  EXPECT_NE(message([&] { Executor::Bind(Loss(), Device::Cpu(), missing); }).find("argument 'w' is missing"),
            std::string::npos);
  Executor::ArrayMap wrong = args;
  wrong["w"] = NDArray(Shape{5}, Device::Cpu(), DType::kFloat64);
  const std::string m = message([&] { Executor::Bind(Loss(), Device::Cpu(), wrong); });
  EXPECT_NE(m.find("cannot be broadcast"), std::string::npos) << m;
  EXPECT_NE(m.find("w (5,)"), std::string::npos) << m;
  Executor::ArrayMap grads = ZeroGrads();
  grads["b"] = NDArray(Shape{4}, Device::Cpu(), DType::kFloat64);
  EXPECT_NE(message([&] { Executor::Bind(Loss(), Device::Cpu(), args, grads, AllReqs(GradReq::kWrite)); })
                .find("gradient of 'b' must be (4, 1)"),
            std::string::npos);
}

TEST(Executor, ReshapeRebindsForANewBatchSize) {
  // y = relu(x) summed over axis 1: reshaping x from (4, 3) to (7, 3) changes the output shape.
  Symbol y = Symbol::Op("sum", {Symbol::Op("relu", {Symbol::Variable("x")})}, {{"axis", "(1,)"}});
  NDArray x = NDArray::FromVector(std::vector<float>(12, 1.0f), Shape{4, 3});
  auto exec = Executor::Bind(y, Device::Cpu(), {{"x", x}});
  auto bigger = exec->Reshape({{"x", Shape{7, 3}}});
  bigger->args().at("x").Fill(2);
  bigger->Forward(false);
  EXPECT_EQ(bigger->outputs()[0].ToVector<float>(), std::vector<float>(7, 6.0f));
  exec->Forward(false);
  EXPECT_EQ(exec->outputs()[0].ToVector<float>(), std::vector<float>(4, 3.0f)) << "the original is untouched";
}

}  // namespace
}  // namespace weft
