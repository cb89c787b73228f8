// The graphs the fusion benchmarks share (bench/fusion_bench.cc on the CPU, bench/gpu_bench.cc on
// a GPU), as symbols:
//   Chain(x): sigmoid(relu(x * a + b) * c - d) * e + f, the 8-op chain of issue 11 (a..f scalars);
//   GeluMlp(sizes): an MLP whose hidden layers are FullyConnected without bias, + bias (broadcast),
//     GELU and Dropout (p 0.1), then a FullyConnected and softmax cross-entropy: the model-level
//     row, where fusion merges bias + GELU forward and the mask, GELU and bias gradients backward;
//   XLNetPattern(): the seed's pattern, one value (relu(x), x (32, 16)) reshaped 12 times, each
//     followed by 12 expand_dims: 144 outputs;
//   RandomGraph(nodes, seed): a random DAG of pointwise ops on (16, 16) arrays with broadcast
//     biases, and transposes and means that groups must go around, for the pass's scaling.
//
//   TrainStep step = BindGeluMlp({784, 1024, 1024, 10}, 128, device);   step.Run();
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weft/weft.h"

namespace bench {

weft::Symbol Chain(const weft::Symbol& x);

weft::Symbol GeluMlp(const std::vector<int>& sizes);
// The shapes GeluMlp's arguments need for a batch (InferArgumentShapes cannot infer the biases).
std::map<std::string, weft::Shape> GeluMlpShapes(const std::vector<int>& sizes, int batch);

weft::Symbol XLNetPattern();

weft::Symbol RandomGraph(int nodes, uint64_t seed);
// The arguments of RandomGraph's symbols and their shapes.
std::map<std::string, weft::Shape> RandomGraphShapes();

// A bound training step: forward, backward, and SGD with momentum on every parameter.
struct TrainStep {
  std::unique_ptr<weft::Executor> exec;
  std::vector<std::string> params;
  std::unique_ptr<weft::SGD> sgd;
  void Run();
};
// GeluMlp bound on `device` with random data and labels (WEFT_USE_FUSION as the caller set it).
TrainStep BindGeluMlp(const std::vector<int>& sizes, int batch, weft::Device device);

}  // namespace bench
