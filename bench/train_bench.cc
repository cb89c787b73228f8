// Training-step time and peak memory against PyTorch on the CPU, in the same run, at the same
// thread count: MLPs 64-256-256-10 (train_mlp's network) and 784-1024-1024-10, batch 128, and a
// 2-layer bidirectional LSTM (T 32, batch 32, 64 inputs, 128 units) with a dense head on its last
// step's output; SGD with momentum 0.9, softmax cross-entropy. One step = forward, backward, and
// the updates of every parameter; steps are pushed back to back and waited for once, as a
// training loop would. Peak memory: weft's pooled allocator high-water mark (every array weft
// allocates), PyTorch's growth of peak resident memory (tensors and everything else).
//
//   bazel run --config=opt //bench:train_bench -- --threads=2 --steps=50
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/peer.h"
#include "weft/weft.h"

namespace {

using weft::Executor;
using weft::NDArray;
using weft::Shape;
using weft::Symbol;

// A network with its loss, the shape of its data, and its classes.
struct Net {
  std::string name;
  Symbol loss;
  Shape data;
  int classes;
};
constexpr int kBatch = 128;
constexpr int kLstmSteps = 32, kLstmBatch = 32, kLstmInput = 64, kLstmHidden = 128;

Symbol Loss(const Symbol& logits) {
  return Symbol::Op("SoftmaxCrossEntropy", {logits, Symbol::Variable("label")}, {}, "loss");
}

Net Mlp(const std::string& name, const std::vector<int>& sizes) {
  Symbol x = Symbol::Variable("data");
  for (size_t i = 1; i < sizes.size(); ++i) {
    x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", std::to_string(sizes[i])}}, "fc" + std::to_string(i));
    if (i + 1 < sizes.size()) x = Symbol::Op("relu", {x});
  }
  return {name, Loss(x), Shape{kBatch, sizes[0]}, sizes.back()};
}

// data (T, N, I) -> 2-layer bidirectional LSTM (T, N, 2H) -> the last step (N, 2H) -> dense (N, 10).
Net Lstm(const std::string& name) {
  Symbol x = Symbol::Op(
      "RNN", {Symbol::Variable("data")},
      {{"mode", "lstm"}, {"state_size", std::to_string(kLstmHidden)}, {"num_layers", "2"}, {"bidirectional", "true"}},
      "lstm");
  x = Symbol::Op(
      "slice", {x},
      {{"begin", "(" + std::to_string(kLstmSteps - 1) + ",)"}, {"end", "(" + std::to_string(kLstmSteps) + ",)"}});
  x = Symbol::Op("reshape", {x}, {{"shape", "(" + std::to_string(kLstmBatch) + ", -1)"}});
  x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", "10"}}, "fc");
  return {name, Loss(x), Shape{kLstmSteps, kLstmBatch, kLstmInput}, 10};
}

struct Result {
  double ms_per_step;
  size_t peak_bytes;
};

// Arguments of the net for a batch: random data, integer labels, parameters as the examples
// initialize them (an LSTM's uniform in +-1/sqrt(H), as PyTorch's), zero initial states.
Executor::ArrayMap MakeArgs(const Net& net, Executor::ArrayMap& grads, std::map<std::string, weft::GradReq>& reqs,
                            std::vector<std::string>& params) {
  const int64_t batch = net.data.ndim() == 3 ? net.data[1] : net.data[0];
  const auto shapes = weft::InferArgumentShapes(net.loss.ToGraph(), {{"data", net.data}, {"label", Shape{batch}}});
  Executor::ArrayMap args;
  weft::Xavier init;
  for (const auto& [name, shape] : shapes) {
    args[name] = NDArray(shape);
    if (name == "label") {
      std::vector<float> labels(batch);
      for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<float>(i % net.classes);
      args[name].CopyFrom(labels);
      continue;
    }
    if (name == "data") {
      args[name].FillNormal(0, 1);
      continue;
    }
    if (name == "lstm_state" || name == "lstm_state_cell") {
      args[name].Fill(0);
      continue;
    }
    if (name == "lstm_parameters") {
      weft::Uniform(1 / std::sqrt(static_cast<double>(kLstmHidden))).InitWeight(name, args[name]);
    } else {
      init.Initialize(name, args[name]);
    }
    params.push_back(name);
    grads[name] = NDArray(shape);
    reqs[name] = weft::GradReq::kWrite;
  }
  return args;
}

Result RunWeft(const Net& net, int steps) {
  weft::Storage& pool = *weft::Storage::Get(weft::Device::Cpu());
  weft::engine::Engine::Get()->WaitForAll();
  pool.ReleaseCache();
  pool.ResetPeak();
  const size_t base = pool.Stats().bytes_in_use;
  Executor::ArrayMap grads;
  std::map<std::string, weft::GradReq> reqs;
  std::vector<std::string> params;
  const Executor::ArrayMap args = MakeArgs(net, grads, reqs, params);
  auto exec = Executor::Bind(net.loss, weft::Device::Cpu(), args, grads, reqs);
  weft::SGD sgd(0.01, 0.9, 0, 1.0 / args.at("label").size());
  auto step = [&] {
    exec->Forward(true);
    exec->Backward();
    for (size_t i = 0; i < params.size(); ++i) sgd.Update(static_cast<int>(i), args.at(params[i]), grads.at(params[i]));
  };
  for (int i = 0; i < 5; ++i) step();
  weft::engine::Engine::Get()->WaitForAll();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  weft::engine::Engine::Get()->WaitForAll();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / steps;
  return {ms, pool.Stats().peak_bytes_in_use - base};
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::IntFlag(argc, argv, "threads", 2);
  const int steps = bench::IntFlag(argc, argv, "steps", 50);
  setenv("WEFT_CPU_WORKERS", "1", 0);  // one worker whose ops use `threads` threads, like PyTorch
  setenv("WEFT_CPU_OP_THREADS", std::to_string(threads).c_str(), 1);
  bench::ChdirToWorkspace();
  const std::vector<Net> nets = {Mlp("mlp 64-256-256-10", {64, 256, 256, 10}),
                                 Mlp("mlp 784-1024-1024-10", {784, 1024, 1024, 10}), Lstm("lstm 2x bidi H128 T32")};
  std::vector<Result> weft_results;
  for (const Net& net : nets) weft_results.push_back(RunWeft(net, steps));
  const nlohmann::json torch =
      bench::RunPeer("bench/torch_train_peer.py", std::to_string(threads) + " " + std::to_string(steps));
  const bool peer = torch.value("available", false);
  std::printf("training step (forward, backward, SGD update), MLPs batch %d, LSTM batch %d, %d thread(s), %d steps\n",
              kBatch, kLstmBatch, threads, steps);
  if (peer) {
    std::printf("PyTorch %s, %d thread(s); BLAS loaded: %s\n\n", torch["version"].get<std::string>().c_str(),
                torch["threads"].get<int>(), torch["blas"].get<std::string>().c_str());
  } else {
    std::printf("PyTorch not available: %s\n\n", torch.value("error", std::string("?")).c_str());
  }
  std::printf("%-24s %10s %10s %7s %14s %14s\n", "network", "weft ms", "torch ms", "ratio", "weft peak MB",
              "torch peak MB");
  for (size_t i = 0; i < nets.size(); ++i) {
    const double w = weft_results[i].ms_per_step, wm = weft_results[i].peak_bytes / 1048576.0;
    if (peer) {
      const double t = torch["nets"][i]["ms_per_step"].get<double>(),
                   tm = torch["nets"][i]["peak_bytes"].get<double>() / 1048576.0;
      std::printf("%-24s %10.3f %10.3f %7.2f %14.1f %14.1f\n", nets[i].name.c_str(), w, t, w / t, wm, tm);
    } else {
      std::printf("%-24s %10.3f %10s %7s %14.1f %14s\n", nets[i].name.c_str(), w, "n/a", "n/a", wm, "n/a");
    }
  }
  weft::engine::Engine::Get()->Shutdown();
  return 0;
}
