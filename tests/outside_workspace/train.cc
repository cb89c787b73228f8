// A stranger's program on weft's public API (built by tests/outside_workspace_test.sh in a
// workspace of its own): trains a small perceptron to tell the four quadrants of the plane apart,
// saves and reloads the model, and prints the test accuracy of the trained and of the reloaded
// model.
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "weft/weft.h"

using namespace weft;

namespace {

constexpr int kBatch = 32;

// n points of [-1, 1)^2 from a fixed sequence, labelled by their quadrant (0..3).
Dataset Quadrants(int n, uint32_t seed) {
  std::vector<float> points, labels;
  for (int i = 0; i < n; ++i) {
    float xy[2];
    for (float& v : xy) {
      seed = seed * 1664525u + 1013904223u;
      v = static_cast<float>(seed >> 8) / (1 << 23) - 1.0f;
      points.push_back(v);
    }
    labels.push_back(static_cast<float>((xy[0] > 0) * 2 + (xy[1] > 0)));
  }
  return {NDArray::FromVector(points, Shape{n, 2}), NDArray::FromVector(labels, Shape{n})};
}

double TestAccuracy(const Symbol& net, const std::map<std::string, NDArray>& params,
                    const Dataset& test) {
  Executor::ArrayMap args = params;
  args["data"] = test.data;
  auto exec = Executor::Bind(net, Device::Cpu(), args);
  exec->Forward(/*is_train=*/false);
  weft::Accuracy accuracy;
  accuracy.Update(test.label, exec->outputs()[0]);
  return accuracy.Get();
}

}  // namespace

int main() {
  try {
    Symbol x = Symbol::Variable("data");
    Symbol h =
        Symbol::Op("relu", {Symbol::Op("FullyConnected", {x}, {{"num_hidden", "16"}}, "fc1")});
    Symbol y = Symbol::Op("FullyConnected", {h}, {{"num_hidden", "4"}}, "fc2");
    Symbol loss = Symbol::Op("SoftmaxCrossEntropy", {y, Symbol::Variable("label")});
    Symbol net = Symbol::Op("softmax", {y});

    auto shapes =
        InferArgumentShapes(loss.ToGraph(), {{"data", Shape{kBatch, 2}}, {"label", Shape{kBatch}}});
    Executor::ArrayMap args, grads;
    std::map<std::string, GradReq> reqs;
    std::map<std::string, NDArray> params;
    Xavier init;
    for (auto& [name, shape] : shapes) {
      args[name] = NDArray(shape);
      if (name == "data" || name == "label") continue;
      init.Initialize(name, args[name]);
      grads[name] = NDArray(shape);
      reqs[name] = GradReq::kWrite;
      params[name] = args[name];
    }
    auto exec = Executor::Bind(loss, Device::Cpu(), args, grads, reqs);
    SGD sgd(/*lr=*/0.5, /*momentum=*/0.9, /*wd=*/0, /*rescale_grad=*/1.0 / kBatch);
    ArrayIter train(Quadrants(512, 1), {.batch_size = kBatch, .shuffle = true, .seed = 7});
    for (int epoch = 0; epoch < 30; ++epoch, train.Reset()) {
      while (train.Next()) {
        train.Current().data.CopyTo(args["data"]);
        train.Current().label.CopyTo(args["label"]);
        exec->Forward(/*is_train=*/true);
        exec->Backward();
        int index = 0;
        for (auto& [name, weight] : params) sgd.Update(index++, weight, grads[name]);
      }
    }
    const Dataset test = Quadrants(400, 2);
    std::printf("trained accuracy %.3f\n", TestAccuracy(net, params, test));

    Save("quadrants.safetensors", params);
    SaveSymbol("quadrants.json", net);
    const double reloaded =
        TestAccuracy(LoadSymbol("quadrants.json"), Load("quadrants.safetensors"), test);
    std::printf("reloaded accuracy %.3f\n", reloaded);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
