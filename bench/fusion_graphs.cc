#include "bench/fusion_graphs.h"

#include <random>

namespace bench {

using weft::NDArray;
using weft::Shape;
using weft::Symbol;

namespace {

Symbol Scalar(const std::string& op, const Symbol& x, double s) {
  return Symbol::Op(op, {x}, {{"scalar", std::to_string(s)}});
}

}  // namespace

Symbol Chain(const Symbol& x) {
  Symbol y = Scalar("add_scalar", Scalar("mul_scalar", x, 1.5), 0.25);
  y = Scalar("sub_scalar", Scalar("mul_scalar", Symbol::Op("relu", {y}), 0.75), 0.5);
  return Scalar("add_scalar", Scalar("mul_scalar", Symbol::Op("sigmoid", {y}), 2.0), -1.0);
}

Symbol GeluMlp(const std::vector<int>& sizes) {
  Symbol x = Symbol::Variable("data");
  for (size_t i = 1; i + 1 < sizes.size(); ++i) {
    const std::string fc = "fc" + std::to_string(i);
    x = Symbol::Op("FullyConnected", {x},
                   {{"num_hidden", std::to_string(sizes[i])}, {"no_bias", "true"}}, fc);
    x = Symbol::Op("gelu", {Symbol::Op("add", {x, Symbol::Variable(fc + "_bias")})});
    x = Symbol::Op("Dropout", {x}, {{"p", "0.1"}});
  }
  const std::string last = "fc" + std::to_string(sizes.size() - 1);
  x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", std::to_string(sizes.back())}}, last);
  return Symbol::Op("SoftmaxCrossEntropy", {x, Symbol::Variable("label")}, {}, "loss");
}

std::map<std::string, Shape> GeluMlpShapes(const std::vector<int>& sizes, int batch) {
  std::map<std::string, Shape> known = {{"data", Shape{batch, sizes[0]}}, {"label", Shape{batch}}};
  for (size_t i = 1; i + 1 < sizes.size(); ++i)
    known["fc" + std::to_string(i) + "_bias"] = Shape{sizes[i]};
  return weft::InferArgumentShapes(GeluMlp(sizes).ToGraph(), known);
}

Symbol XLNetPattern() {
  const Symbol h = Symbol::Op("relu", {Symbol::Variable("x")});
  std::vector<Symbol> outs;
  for (int r = 0; r < 12; ++r) {
    const Symbol reshaped = Symbol::Op("reshape", {h}, {{"shape", "(16, 8, 4)"}});
    for (int e = 0; e < 12; ++e)
      outs.push_back(Symbol::Op("expand_dims", {reshaped}, {{"axis", std::to_string(e % 4)}}));
  }
  return Symbol::Group(outs);
}

// Each node reads a recent value (chains) and, for binary ops, any earlier one (fan-in); one in
// ten is a transpose or x - mean(x), which are not pointwise.
Symbol RandomGraph(int nodes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](size_t n) {
    return static_cast<size_t>(std::uniform_int_distribution<size_t>(0, n - 1)(rng));
  };
  std::vector<Symbol> v = {Symbol::Variable("x0"), Symbol::Variable("x1"), Symbol::Variable("x2")};
  std::vector<bool> read(v.size(), true);  // the outputs are the values nothing reads
  const Symbol bias = Symbol::Variable("bias");
  static const char* kUnary[] = {"relu", "sigmoid", "tanh", "neg", "square"};
  static const char* kBinary[] = {"add", "mul", "sub", "maximum"};
  for (int i = 0; i < nodes; ++i) {
    const size_t a = v.size() - 1 - pick(std::min<size_t>(v.size(), 8)), b = pick(v.size());
    switch (pick(10)) {
      case 0:
        v.push_back(Symbol::Op("transpose", {v[a]}));
        break;
      case 1:
        v.push_back(Symbol::Op(
            "sub", {v[a], Symbol::Op("mean", {v[a]}, {{"axis", "-1"}, {"keepdims", "true"}})}));
        break;
      case 2:
        v.push_back(Symbol::Op("add", {v[a], bias}));
        break;
      case 3:
        v.push_back(Scalar("mul_scalar", v[a], 0.5));
        break;
      case 4:
      case 5:
      case 6:
        v.push_back(Symbol::Op(kUnary[pick(5)], {v[a]}));
        break;
      default:
        v.push_back(Symbol::Op(kBinary[pick(4)], {v[a], v[b]})), read[b] = true;
        break;
    }
    read[a] = true;
    read.push_back(false);
  }
  std::vector<Symbol> outs;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!read[i]) outs.push_back(v[i]);
  }
  return Symbol::Group(outs);
}

std::map<std::string, Shape> RandomGraphShapes() {
  return {{"x0", Shape{16, 16}}, {"x1", Shape{16, 16}}, {"x2", Shape{16, 16}}, {"bias", Shape{16}}};
}

void TrainStep::Run() {
  exec->Forward(/*is_train=*/true);
  exec->Backward();
  for (size_t i = 0; i < params.size(); ++i) {
    sgd->Update(static_cast<int>(i), exec->args().at(params[i]), exec->arg_grads().at(params[i]));
  }
}

TrainStep BindGeluMlp(const std::vector<int>& sizes, int batch, weft::Device device) {
  weft::Executor::ArrayMap args, grads;
  std::map<std::string, weft::GradReq> reqs;
  TrainStep step;
  weft::Xavier init;
  for (const auto& [name, shape] : GeluMlpShapes(sizes, batch)) {
    NDArray host(shape);
    if (name == "label") {
      std::vector<float> labels(batch);
      for (int i = 0; i < batch; ++i) labels[i] = static_cast<float>(i % sizes.back());
      host.CopyFrom(labels);
    } else if (name == "data") {
      host.FillNormal(0, 1);
    } else {
      init.Initialize(name, host);
      step.params.push_back(name);
    }
    args[name] = device == weft::Device::Cpu() ? host : host.Copy(device);
    if (name == "data" || name == "label") continue;
    grads[name] = NDArray(shape, device);
    reqs[name] = weft::GradReq::kWrite;
  }
  step.exec = weft::Executor::Bind(GeluMlp(sizes), device, args, grads, reqs);
  step.sgd = std::make_unique<weft::SGD>(0.01, 0.9, 0, 1.0 / batch);
  return step;
}

}  // namespace bench
