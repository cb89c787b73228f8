// executor/: a bound graph computes what the imperative ops compute, its gradients match finite
// differences, gradient requests (write, add, null) do what they say, binding errors name the
// argument, and memory planning changes no result. Ops that mutate an input all run, random ops
// draw disjoint ranges however the graph is cut into bulk segments, and destroying an executor
// waits only for its own ops and leaves other errors to their waiters. ToDot draws what Bind made.
#include "executor/executor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <regex>

#include "core/error.h"
#include "engine/engine.h"
#include "graph/symbol.h"
#include "passes/infer.h"
#include "passes/pipeline.h"
#include "storage/ndarray.h"
#include "storage/random.h"
#include "tests/engine_test_util.h"
#include "tests/weft_test_util.h"
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
  auto exec =
      Executor::Bind(Loss(), Device::Cpu(), Arrays(values), grads, AllReqs(GradReq::kWrite));
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
  NDArray xw = Invoke("mul", {x, w})[0], pre = Invoke("add", {xw, b})[0],
          h = Invoke("tanh", {pre})[0];
  NDArray sq = Invoke("square", {h})[0];
  NDArray ones(Shape{}, Device::Cpu(), DType::kFloat64);
  ones.Fill(1);
  auto back = [](const char* op, std::vector<NDArray> in, std::vector<NDArray> out, NDArray dy) {
    std::vector<NDArray> grads;
    for (const NDArray& a : in) grads.emplace_back(a.shape(), Device::Cpu(), DType::kFloat64);
    const Op& def = GetOp(op);
    InvokeBackward(def, ParseAttrs(def, {}), in, out, {dy}, grads,
                   std::vector<OpReq>(in.size(), OpReq::kWrite));
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
    for (size_t i = 0; i < va.size(); ++i)
      EXPECT_NEAR(va[i], vb[i], 1e-12) << what << "[" << i << "]";
  };
  expect_equal(grads["x"], d_mul[0], "x");
  expect_equal(grads["w"], d_mul[1], "w");
  expect_equal(grads["b"], d_add[1], "b");
}

TEST(Executor, AddRequestAccumulatesAcrossBackwardCalls) {
  auto values = RandomValues(3);
  Executor::ArrayMap written = ZeroGrads(), accumulated = ZeroGrads(0.25);
  auto once =
      Executor::Bind(Loss(), Device::Cpu(), Arrays(values), written, AllReqs(GradReq::kWrite));
  once->Forward(true);
  once->Backward();
  auto twice =
      Executor::Bind(Loss(), Device::Cpu(), Arrays(values), accumulated, AllReqs(GradReq::kAdd));
  for (int i = 0; i < 2; ++i) {
    twice->Forward(true);
    twice->Backward();
  }
  for (const auto& [name, shape] : kShapes) {
    std::vector<double> one = written[name].ToVector<double>(),
                        two = accumulated[name].ToVector<double>();
    for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(two[i], 0.25 + 2 * one[i], 1e-12) << name;
  }
}

TEST(Executor, NullRequestSkipsTheWorkOnlyItNeeds) {
  auto values = RandomValues(4);
  auto all =
      Executor::Bind(Loss(), Device::Cpu(), Arrays(values), ZeroGrads(), AllReqs(GradReq::kWrite));
  Executor::ArrayMap grads = ZeroGrads(7);
  auto only_b =
      Executor::Bind(Loss(), Device::Cpu(), Arrays(values), grads,
                     {{"x", GradReq::kNull}, {"w", GradReq::kNull}, {"b", GradReq::kWrite}});
  EXPECT_LT(only_b->stats().backward_nodes, all->stats().backward_nodes)
      << "mul's backward is not needed for b";
  only_b->Forward(true);
  only_b->Backward();
  EXPECT_EQ(grads["x"].ToVector<double>(), std::vector<double>(12, 7.0))
      << "a null gradient is not written";
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
    auto exec =
        Executor::Bind(Loss(), Device::Cpu(), Arrays(values), grads, AllReqs(GradReq::kWrite));
    exec->Forward(true);
    exec->Backward();
    results[planned] = exec->outputs()[0].ToVector<double>();
    for (const char* name : {"x", "w", "b"}) {
      std::vector<double> g = grads[name].ToVector<double>();
      results[planned].insert(results[planned].end(), g.begin(), g.end());
    }
    if (planned) {
      EXPECT_LT(exec->stats().plan_bytes, exec->stats().naive_bytes);
    }
  }
  unsetenv("WEFT_PLAN_MEMORY");
  EXPECT_EQ(results[0], results[1]);
}

TEST(Executor, NullRequestPushesFewerEngineOps) {
  setenv("WEFT_EXEC_BULK_SIZE", "1", 1);  // one engine op per node, so ops count nodes run
  auto values = RandomValues(7);
  auto all =
      Executor::Bind(Loss(), Device::Cpu(), Arrays(values), ZeroGrads(), AllReqs(GradReq::kWrite));
  auto only_b =
      Executor::Bind(Loss(), Device::Cpu(), Arrays(values), ZeroGrads(),
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
  auto shapes =
      InferArgumentShapes(loss.ToGraph(), {{"data", Shape{32, 20}}, {"label", Shape{32}}});
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
  EXPECT_NE(message([&] {
              Executor::Bind(Loss(), Device::Cpu(), missing);
            }).find("argument 'w' is missing"),
            std::string::npos);
  Executor::ArrayMap wrong = args;
  wrong["w"] = NDArray(Shape{5}, Device::Cpu(), DType::kFloat64);
  const std::string m = message([&] { Executor::Bind(Loss(), Device::Cpu(), wrong); });
  EXPECT_NE(m.find("cannot be broadcast"), std::string::npos) << m;
  EXPECT_NE(m.find("w (5,)"), std::string::npos) << m;
  Executor::ArrayMap grads = ZeroGrads();
  grads["b"] = NDArray(Shape{4}, Device::Cpu(), DType::kFloat64);
  EXPECT_NE(message([&] {
              Executor::Bind(Loss(), Device::Cpu(), args, grads, AllReqs(GradReq::kWrite));
            }).find("gradient of 'b' must be (4, 1)"),
            std::string::npos);
}

// data (2, 4) -> fc (5 units): fc_weight must be (5, 4), fc_bias (5,).
Symbol OneLayer() {
  return Symbol::Op("FullyConnected", {Symbol::Variable("data")}, {{"num_hidden", "5"}}, "fc");
}

Executor::ArrayMap OneLayerArrays(const Shape& weight) {
  Executor::ArrayMap arrays = {{"data", NDArray(Shape{2, 4})},
                               {"fc_weight", NDArray(weight)},
                               {"fc_bias", NDArray(Shape{5})}};
  for (auto& [name, array] : arrays) array.Fill(0);
  return arrays;
}

TEST(Executor, AWrongArgumentIsBlamedRatherThanItsRightGradient) {
  const Executor::ArrayMap args = OneLayerArrays(Shape{5, 3});  // the weight is wrong
  const Executor::ArrayMap grads = {{"fc_weight", NDArray(Shape{5, 4})},
                                    {"fc_bias", NDArray(Shape{5})}};
  const std::map<std::string, GradReq> reqs = {{"fc_weight", GradReq::kWrite},
                                               {"fc_bias", GradReq::kWrite}};
  const std::string m =
      testing::ErrorMessage([&] { Executor::Bind(OneLayer(), Device::Cpu(), args, grads, reqs); });
  EXPECT_EQ(m.find("gradient of"), std::string::npos) << m;
  EXPECT_NE(m.find("fc_weight (5, 3)"), std::string::npos) << m;
  EXPECT_NE(m.find("weight must be (5, 4), found (5, 3)"), std::string::npos) << m;
}

TEST(Executor, NamesTheGraphDoesNotHaveAreErrors) {
  const Executor::ArrayMap args = OneLayerArrays(Shape{5, 4});
  const Executor::ArrayMap grads = {{"fc_weight", NDArray(Shape{5, 4})},
                                    {"fc_bias", NDArray(Shape{5})}};
  const std::map<std::string, GradReq> reqs = {{"fc_weight", GradReq::kWrite},
                                               {"fc_bias", GradReq::kWrite}};
  const std::string known = "the graph's arguments are 'data', 'fc_weight', 'fc_bias'";
  Executor::ArrayMap typo_arg = args;
  typo_arg["fc_wieght"] = NDArray(Shape{5, 4});
  testing::ExpectErrorContains(
      [&] { Executor::Bind(OneLayer(), Device::Cpu(), typo_arg, grads, reqs); },
      {"Bind", "argument 'fc_wieght'", known, "did you mean 'fc_weight'?"});
  Executor::ArrayMap typo_grad = grads;
  typo_grad["fc_bais"] = NDArray(Shape{5});
  testing::ExpectErrorContains(
      [&] { Executor::Bind(OneLayer(), Device::Cpu(), args, typo_grad, reqs); },
      {"Bind", "gradient array 'fc_bais'", known, "did you mean 'fc_bias'?"});
  std::map<std::string, GradReq> typo_req = reqs;
  typo_req["Data"] = GradReq::kNull;
  testing::ExpectErrorContains(
      [&] { Executor::Bind(OneLayer(), Device::Cpu(), args, grads, typo_req); },
      {"Bind", "gradient request 'Data'", known, "did you mean 'data'?"});
  Executor::ArrayMap unlike = args;
  unlike["labels"] = NDArray(Shape{2});
  const std::string m =
      testing::ErrorMessage([&] { Executor::Bind(OneLayer(), Device::Cpu(), unlike); });
  EXPECT_NE(m.find("argument 'labels'"), std::string::npos) << m;
  EXPECT_EQ(m.find("did you mean"), std::string::npos) << "nothing is close to 'labels': " << m;
  EXPECT_NO_THROW(Executor::Bind(OneLayer(), Device::Cpu(), args, grads, reqs));
}

// A chain of 30,000 nodes binds (every pass walks it), runs forward and backward, and is
// destroyed, on a 512 KB stack: nothing recurses per node.
TEST(Executor, ALongChainBindsRunsAndIsDestroyedWithoutRecursion) {
  constexpr int kNodes = 30'000;
  testing::RunOnSmallStack(512 << 10, [&] {
    Symbol y = Symbol::Variable("x");  // y = relu(-(-(...-x))), an odd number of negations
    for (int n = 0; n < kNodes - 1; ++n) y = Symbol::Op("neg", {y});
    y = Symbol::Op("relu", {y});
    NDArray x = NDArray::FromVector(std::vector<float>{-1, 2}, Shape{2}), grad(Shape{2});
    auto exec =
        Executor::Bind(y, Device::Cpu(), {{"x", x}}, {{"x", grad}}, {{"x", GradReq::kWrite}});
    exec->Forward(true);
    exec->Backward();
    EXPECT_EQ(exec->outputs()[0].ToVector<float>(), (std::vector<float>{1, 0}));
    EXPECT_EQ(grad.ToVector<float>(), (std::vector<float>{-1, 0}));
  });
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
  EXPECT_EQ(exec->outputs()[0].ToVector<float>(), std::vector<float>(4, 3.0f))
      << "the original is untouched";
}

// Sets WEFT_EXEC_BULK_SIZE for what is bound in its lifetime.
class BulkSize {
 public:
  explicit BulkSize(int nodes) { setenv("WEFT_EXEC_BULK_SIZE", std::to_string(nodes).c_str(), 1); }
  ~BulkSize() { unsetenv("WEFT_EXEC_BULK_SIZE"); }
};

std::vector<double> Values(const NDArray& a) { return a.ToVector<double>(); }

TEST(Executor, TwoIdenticalOptimizerUpdatesInOneGraphBothRun) {
  // Same weight, gradient, momentum and attributes: each node updates the momentum in place, so
  // the second sees the first's update. By hand, with lr 0.5 and momentum 0.9:
  //   mom1 = 0.9 * mom - 0.5 * g = (-0.025, 0.95)    a = w + mom1 = (0.975, 2.95)
  //   mom2 = 0.9 * mom1 - 0.5 * g = (-0.2725, 1.355) b = w + mom2 = (0.7275, 3.355)
  const AttrMap attrs = {{"lr", "0.5"}, {"momentum", "0.9"}};
  Symbol w = Symbol::Variable("w"), g = Symbol::Variable("g"), mom = Symbol::Variable("mom");
  Symbol updates = Symbol::Group({Symbol::Op("sgd_mom_update", {w, g, mom}, attrs, "a"),
                                  Symbol::Op("sgd_mom_update", {w, g, mom}, attrs, "b")});
  for (int bulk : {1, 8}) {
    Executor::ArrayMap args = {
        {"w", NDArray::FromVector(std::vector<double>{1, 2}, Shape{2})},
        {"g", NDArray::FromVector(std::vector<double>{0.5, -1}, Shape{2})},
        {"mom", NDArray::FromVector(std::vector<double>{0.25, 0.5}, Shape{2})}};
    std::unique_ptr<Executor> exec;
    {
      BulkSize size(bulk);
      exec = Executor::Bind(updates, Device::Cpu(), args);
    }
    exec->Forward(/*is_train=*/false);
    const std::vector<double> a = Values(exec->outputs()[0]), b = Values(exec->outputs()[1]),
                              m = Values(args["mom"]);
    const std::vector<double> a_want = {0.975, 2.95}, b_want = {0.7275, 3.355},
                              m_want = {-0.2725, 1.355};
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_NEAR(a[i], a_want[i], 1e-12) << "bulk " << bulk << ", a[" << i << "]";
      EXPECT_NEAR(b[i], b_want[i], 1e-12)
          << "bulk " << bulk << ", b[" << i << "]: the momentum applied twice";
      EXPECT_NEAR(m[i], m_want[i], 1e-12) << "bulk " << bulk << ", mom[" << i << "]";
    }
  }
}

// write_at updates its data argument in place and its output is that argument's array
// (Op::UpdatedInput): no copy, and its readers run after the write, as their edges say. Two
// writes chained on one cache, with memory planning on and off, over two forwards: the second
// keeps what the first wrote (a key-value cache across generation steps).
TEST(Executor, AnOutputThatAnOpUpdatesInPlaceIsItsArgumentsArray) {
  const Symbol cache = Symbol::Variable("cache"), v = Symbol::Variable("v");
  const Symbol first = Symbol::Op("write_at", {cache, v, Symbol::Variable("at")}, {}, "first");
  const Symbol second = Symbol::Op(
      "write_at", {first, Symbol::Op("neg", {v}), Symbol::Variable("at2")}, {}, "second");
  const Symbol net = Symbol::Group({second, Symbol::Op("relu", {second}, {}, "reader")});
  for (const char* plan : {"1", "0"}) {
    testing::ScopedEnv env("WEFT_PLAN_MEMORY", plan);
    Executor::ArrayMap args = {{"cache", NDArray::FromVector(std::vector<float>(4, 0), Shape{4})},
                               {"v", NDArray::FromVector(std::vector<float>{1}, Shape{1})},
                               {"at", NDArray::FromVector(std::vector<float>{0}, Shape{1})},
                               {"at2", NDArray::FromVector(std::vector<float>{3}, Shape{1})}};
    auto exec = Executor::Bind(net, Device::Cpu(), args);
    exec->Forward(/*is_train=*/false);
    args["v"].CopyFrom(std::vector<float>{2});
    args["at"].CopyFrom(std::vector<float>{1});
    args["at2"].CopyFrom(std::vector<float>{2});
    exec->Forward(/*is_train=*/false);
    const std::vector<float> want = {1, 2, -2, -1};
    EXPECT_EQ(args["cache"].ToVector<float>(), want) << "WEFT_PLAN_MEMORY=" << plan;
    EXPECT_EQ(exec->outputs()[0].View().raw(), args["cache"].View().raw()) << "the same array";
    EXPECT_EQ(exec->outputs()[1].ToVector<float>(), (std::vector<float>{1, 2, 0, 0}))
        << "the reader runs after both writes";
  }
}

// An extension appends, after the gradients of loss = sum(x * w1) + sum(x * w2) (each gradient
// is the column sums of x), u1 = sgd_update(w1, g1) written back into w1, then r = g2 * w1 and
// u2 = sgd_update(w2, r) written back into w2. r is after u1 in the appended order, yet reads w1's
// old value: the executor runs write-backs after every other node.
TEST(Executor, AnExtensionsWriteBacksRunAfterEveryOtherReaderOfTheirArgument) {
  Symbol x = Symbol::Variable("x"), w1 = Symbol::Variable("w1"), w2 = Symbol::Variable("w2");
  Symbol loss = Symbol::Op("add", {Symbol::Op("sum", {Symbol::Op("mul", {x, w1})}),
                                   Symbol::Op("sum", {Symbol::Op("mul", {x, w2})})});
  GraphExtension extension;
  extension.write_back = {"w1", "w2"};
  extension.append = [](const Graph& g, const std::vector<std::string>& grad_args) {
    GraphBuilder b = g.ToBuilder();
    std::map<std::string, NodeEntry> var, grad;
    for (uint32_t n : g.ArgumentNodes()) var[g.node(n).name] = {n, 0};
    for (size_t i = 0; i < grad_args.size(); ++i)
      grad[grad_args[i]] = g.outputs()[g.num_forward_outputs() + i];
    const auto add = [&](const std::string& op, const AttrMap& attrs, std::vector<NodeEntry> in,
                         const char* param) {
      Node node;
      node.op = &GetOp(op);
      node.name = op + std::to_string(b.nodes.size());
      node.attrs = ParseAttrs(*node.op, attrs);
      node.inputs = std::move(in);
      node.forward_node = var.at(param).node;
      b.nodes.push_back(std::move(node));
      return NodeEntry{static_cast<uint32_t>(b.nodes.size() - 1), 0};
    };
    b.outputs.push_back(add("sgd_update", {{"lr", "0.5"}}, {var.at("w1"), grad.at("w1")}, "w1"));
    const NodeEntry r = add("mul", {}, {grad.at("w2"), var.at("w1")}, "w2");
    b.outputs.push_back(add("sgd_update", {{"lr", "0.5"}}, {var.at("w2"), r}, "w2"));
    return std::move(b).Freeze();
  };
  const std::vector<double> xs = {1, 2, 3, 4, 5, 6}, w1_old = {0.5, -1, 2}, w2_old = {1, 1, -3};
  for (int bulk : {1, 8}) {
    Executor::ArrayMap args = {{"x", NDArray::FromVector(xs, Shape{2, 3})},
                               {"w1", NDArray::FromVector(w1_old, Shape{3})},
                               {"w2", NDArray::FromVector(w2_old, Shape{3})}};
    Executor::ArrayMap grads = {{"w1", NDArray(Shape{3}, Device::Cpu(), DType::kFloat64)},
                                {"w2", NDArray(Shape{3}, Device::Cpu(), DType::kFloat64)}};
    std::unique_ptr<Executor> exec;
    {
      BulkSize size(bulk);
      exec = Executor::Bind(loss, Device::Cpu(), args, grads,
                            {{"w1", GradReq::kWrite}, {"w2", GradReq::kWrite}}, extension);
    }
    exec->Forward(/*is_train=*/true);
    exec->Backward();
    const std::vector<double> w1 = Values(args["w1"]), w2 = Values(args["w2"]);
    for (size_t i = 0; i < 3; ++i) {
      const double g = xs[i] + xs[i + 3];
      EXPECT_DOUBLE_EQ(w1[i], w1_old[i] - 0.5 * g) << "bulk " << bulk << ", w1[" << i << "]";
      EXPECT_DOUBLE_EQ(w2[i], w2_old[i] - 0.5 * g * w1_old[i])
          << "bulk " << bulk << ", w2[" << i << "]: r read "
          << "the new w1";
    }
  }
  GraphExtension wrong = extension;
  wrong.write_back = {"x", "w2"};
  Executor::ArrayMap args = {{"x", NDArray(Shape{2, 3}, Device::Cpu(), DType::kFloat64)},
                             {"w1", NDArray(Shape{3}, Device::Cpu(), DType::kFloat64)},
                             {"w2", NDArray(Shape{3}, Device::Cpu(), DType::kFloat64)}};
  Executor::ArrayMap grads = {{"w1", NDArray(Shape{3}, Device::Cpu(), DType::kFloat64)},
                              {"w2", NDArray(Shape{3}, Device::Cpu(), DType::kFloat64)}};
  testing::ExpectErrorContains(
      [&] {
        Executor::Bind(loss, Device::Cpu(), args, grads,
                       {{"w1", GradReq::kWrite}, {"w2", GradReq::kWrite}}, wrong);
      },
      {"argument 'x' ((2, 3) float64) cannot take the output written into it, (3,) float64"});
}

size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Loss()'s training graph, one node per segment: a cluster per fused group and per segment, and
// each edge names the buffer the memory plan gave its entry (the pipeline run alone, on the same
// request, makes the same plan).
TEST(Executor, ToDotDrawsFusedGroupsSegmentsAndThePlansBuffers) {
  std::unique_ptr<Executor> exec;
  {
    BulkSize size(1);
    exec = Executor::Bind(Loss(), Device::Cpu(), Arrays(RandomValues(1)), ZeroGrads(),
                          AllReqs(GradReq::kWrite));
  }
  const std::string dot = exec->ToDot();
  EXPECT_EQ(dot.rfind("digraph weft {", 0), 0u) << dot;
  EXPECT_NE(dot.find("on cpu"), std::string::npos);
  const ExecutorStats stats = exec->stats();
  ASSERT_GT(stats.fused_groups, 0u);
  EXPECT_EQ(Count(dot, "subgraph cluster_fused_"), stats.fused_groups);
  EXPECT_EQ(Count(dot, "subgraph cluster_segment_"), stats.forward_nodes + stats.backward_nodes);
  BindRequest request;
  request.device = Device::Cpu();
  request.differentiate = {"x", "w", "b"};
  for (const auto& [name, shape] : kShapes) {
    request.shapes[name] = shape;
    request.dtypes[name] = DType::kFloat64;
  }
  const BindResult bound = RunBindPipeline(Loss().ToGraph(), request);
  const MemoryPlan& plan = bound.graph.memory();
  const std::regex edge("tooltip=\"entry ([0-9]+): (user array|buf ([0-9]+))\"");
  size_t buffers = 0;
  for (std::sregex_iterator it(dot.begin(), dot.end(), edge), end; it != end; ++it) {
    const int entry = std::stoi((*it)[1]);
    ASSERT_LT(entry, static_cast<int>(plan.storage_id.size()));
    const int expected = (*it)[3].matched ? std::stoi((*it)[3]) : MemoryPlan::kExternal;
    EXPECT_EQ(plan.storage_id[entry], expected) << "entry " << entry;
    buffers += (*it)[3].matched;
  }
  EXPECT_GT(buffers, 0u);
}

TEST(Executor, ToDotDrawsTheGraphAfterEachPass) {
  auto exec = Executor::Bind(Loss(), Device::Cpu(), Arrays(RandomValues(1)), ZeroGrads(),
                             AllReqs(GradReq::kWrite));
  const std::string fused = exec->ToDot("fuse_pointwise");
  EXPECT_NE(fused.find("after fuse_pointwise on cpu"), std::string::npos);
  EXPECT_EQ(Count(fused, "subgraph cluster_fused_"), exec->stats().fused_groups);
  EXPECT_EQ(fused.find("buf "), std::string::npos) << "not planned yet";
  EXPECT_EQ(exec->ToDot("gradient").find("cluster_fused"), std::string::npos);
  testing::ExpectErrorContains([&] { exec->ToDot("fusion"); },
                               {"no pass 'fusion'", "'fuse_pointwise'", "plan_memory"});
}

// Dropout's mask for a range that starts at block `offset` of seed `seed`'s stream, computed from
// the generator alone: element i is kept (x 2) when the stream's i-th uniform number is >= 0.5.
std::vector<float> ReferenceMask(uint64_t seed, uint64_t offset, int64_t n) {
  PhiloxStream stream(RandomKey{seed, offset});
  std::vector<float> mask;
  for (int64_t i = 0; i < n; ++i) mask.push_back(stream.Uniform() >= 0.5f ? 2.0f : 0.0f);
  return mask;
}

TEST(Executor, RandomOpsInOneSegmentDrawDisjointRangesHoweverItIsCut) {
  // Three Dropouts of 10, 3 and 7 elements (3, 1 and 2 Philox blocks), in this node order. Bound
  // with segments of 1, 2, 3 and 8 nodes, each must draw exactly its own range, right after the
  // previous one's: blocks [0, 3), [3, 4) and [4, 6) of the stream; the next reservation starts at
  // block 6. Masks equal to the generator's numbers for those ranges prove the ranges are
  // disjoint (and that no node's numbers depend on where the segments are cut).
  constexpr uint64_t kSeed = 2024;
  const int64_t sizes[] = {10, 3, 7};
  const uint64_t offsets[] = {0, 3, 4};
  std::vector<Symbol> masks;
  Executor::ArrayMap args;
  for (int i = 0; i < 3; ++i) {
    const std::string x = "x" + std::to_string(i);
    // Ones in: the result is the mask.
    masks.push_back(
        Symbol::Op("Dropout", {Symbol::Variable(x)}, {{"p", "0.5"}}, "drop" + std::to_string(i)));
    args[x] = NDArray::FromVector(std::vector<float>(sizes[i], 1.0f), Shape{sizes[i]});
  }
  for (int bulk : {1, 2, 3, 8}) {
    std::unique_ptr<Executor> exec;
    {
      BulkSize size(bulk);
      exec = Executor::Bind(Symbol::Group(masks), Device::Cpu(), args);
    }
    SeedRandom(kSeed);
    exec->Forward(/*is_train=*/true);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(exec->outputs()[i].ToVector<float>(), ReferenceMask(kSeed, offsets[i], sizes[i]))
          << "bulk " << bulk << ", Dropout " << i << ": blocks from " << offsets[i];
    }
    EXPECT_EQ(ReserveRandom(Device::Cpu(), 1).offset, 6u)
        << "bulk " << bulk << ": reserved exactly what was drawn";
    SeedRandom(kSeed);
    exec->Forward(/*is_train=*/false);
    EXPECT_EQ(exec->outputs()[0].ToVector<float>(), std::vector<float>(sizes[0], 1.0f));
    EXPECT_EQ(ReserveRandom(Device::Cpu(), 1).offset, 0u)
        << "bulk " << bulk << ": outside training nothing is drawn";
  }
}

TEST(Executor, ABoundDropoutDrawsWhatTheImperativeOneDraws) {
  // One description of the call (ops/invocation.h) on both paths: the same seed, the same mask,
  // and the same position of the stream afterwards.
  const NDArray x = NDArray::FromVector(std::vector<float>(1001, 3.0f), Shape{7, 143});
  SeedRandom(5);
  const std::vector<float> imperative =
      Invoke("Dropout", {x}, {{"p", "0.3"}}, {.is_train = true})[0].ToVector<float>();
  const uint64_t imperative_next = ReserveRandom(Device::Cpu(), 1).offset;
  Symbol dropped = Symbol::Op("Dropout", {Symbol::Variable("x")}, {{"p", "0.3"}});
  EXPECT_EQ(dropped.num_outputs(), 1u) << "the mask is the op's own, as the RNN's reserve is";
  auto exec = Executor::Bind(dropped, Device::Cpu(), {{"x", x}});
  SeedRandom(5);
  exec->Forward(/*is_train=*/true);
  EXPECT_EQ(exec->outputs()[0].ToVector<float>(), imperative);
  EXPECT_EQ(ReserveRandom(Device::Cpu(), 1).offset, imperative_next);
  EXPECT_EQ(imperative_next, RandomBlocks(1001));
}

// An imperative SoftmaxCrossEntropy whose label is out of range: it fails while it runs.
NDArray FailingImperativeOp() {
  NDArray logits = NDArray::FromVector(std::vector<float>{1, 2, 3}, Shape{1, 3});
  NDArray label = NDArray::FromVector(std::vector<float>{7}, Shape{1});
  return Invoke("SoftmaxCrossEntropy", {logits, label})[0];
}

std::unique_ptr<Executor> UnrelatedExecutor() {
  NDArray x = NDArray::FromVector(std::vector<float>{-1, 2}, Shape{2});
  return Executor::Bind(Symbol::Op("relu", {Symbol::Variable("x")}), Device::Cpu(), {{"x", x}});
}

// Head gradients written into the executor's own arrays and passed back give Backward({dy})'s
// gradients without a copy: a gated reader holds the head array while the backward runs (a copy
// onto it, a write, would wait for the gate), and the ones that follow are ones again.
TEST(Executor, BackwardReadsItsOwnHeadGradientsWithoutACopy) {
  auto values = RandomValues(5);
  const Symbol h = Symbol::Op(
      "tanh", {Symbol::Op("add", {Symbol::Op("mul", {Symbol::Variable("x"), Symbol::Variable("w")}),
                                  Symbol::Variable("b")})});
  const NDArray dy = NDArray::FromVector(RandomValues(6).at("x"), kShapes.at("x"));
  Executor::ArrayMap copied = ZeroGrads(), own = ZeroGrads();
  auto a = Executor::Bind(h, Device::Cpu(), Arrays(values), copied, AllReqs(GradReq::kWrite));
  auto b = Executor::Bind(h, Device::Cpu(), Arrays(values), own, AllReqs(GradReq::kWrite));
  a->Forward(true);
  a->Backward({dy});
  b->Forward(true);
  dy.CopyTo(b->head_grads().at(0));
  engine::Engine* engine = engine::Engine::Get();
  testing::Latch gate, reached;
  engine->PushSync([&gate](engine::RunContext) { gate.WaitFor(std::chrono::seconds(60)); },
                   Device::Cpu(), {b->head_grads()[0].var()}, {},
                   engine::FnProperty::kCpuPrioritized);
  b->Backward(b->head_grads());
  engine->PushSync([&reached](engine::RunContext) { reached.Open(); }, Device::Cpu(),
                   {own["x"].var()}, {});
  EXPECT_TRUE(reached.WaitFor(std::chrono::seconds(30)))
      << "the backward waited for the head array's reader";
  gate.Open();
  engine->WaitForAll();  // the gate's op has returned: `gate` may go
  for (const auto& [name, shape] : kShapes)
    EXPECT_EQ(own[name].ToVector<double>(), copied[name].ToVector<double>());
  a->Backward();
  b->Backward();
  for (const auto& [name, shape] : kShapes)
    EXPECT_EQ(own[name].ToVector<double>(), copied[name].ToVector<double>());
}

TEST(Executor, DestroyingAnExecutorLeavesOtherErrorsToTheirWaiters) {
  engine::Engine* engine = engine::Engine::Get();
  engine->WaitForAll();  // nothing pending from earlier tests
  FailingImperativeOp();
  {
    auto exec = UnrelatedExecutor();
    exec->Forward(false);
    EXPECT_EQ(exec->outputs()[0].ToVector<float>(), (std::vector<float>{0, 2}));
  }  // destroyed: must neither report nor clear the imperative op's error
  EXPECT_NE(testing::ErrorMessage([&] { engine->WaitForAll(); }).find("label of row 0 is 7"),
            std::string::npos);
}

TEST(Executor, DestroyingAnExecutorWaitsOnlyForItsOwnOps) {
  // An unrelated op that runs until the test opens the gate, after the executor is gone: had the
  // destructor waited for all work, it would never return (the watchdog turns that into a failure).
  engine::Engine* engine = engine::Engine::Get();
  engine::VarHandle unrelated = engine->NewVariable();
  testing::Latch gate;
  engine->PushSync([&gate](engine::RunContext) { gate.WaitFor(std::chrono::seconds(120)); },
                   Device::Cpu(), {}, {unrelated}, engine::FnProperty::kCpuPrioritized);
  {
    auto exec = UnrelatedExecutor();
    exec->Forward(false);
    testing::Watchdog watchdog(std::chrono::seconds(20),
                               "~Executor waited for an op that is not its own");
    exec.reset();
  }
  gate.Open();
  engine->WaitForVar(unrelated);
  engine->DeleteVariable([](engine::RunContext) {}, Device::Cpu(), unrelated);
}

}  // namespace
}  // namespace weft
