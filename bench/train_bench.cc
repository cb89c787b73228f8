// Training-step time and peak memory against PyTorch on the CPU, in the same run, at the same
// thread count: MLPs 64-256-256-10 (train_mlp's network) and 784-1024-1024-10, batch 128, and a
// 2-layer bidirectional LSTM (T 32, batch 32, 64 inputs, 128 units) with a dense head on its last
// step's output; SGD with momentum 0.9, softmax cross-entropy. One step = forward, backward, and
// the updates of every parameter; steps are pushed back to back and waited for once, as a
// training loop would. weft's step two ways: the loop (an executor's Forward and Backward, then
// one imperative update per parameter) and weft::Trainer (the same step bound as one graph,
// updates included). Each figure is the median of `rounds` rounds of `steps` steps (weft's two
// alternate round by round). Peak memory: weft's pooled allocator high-water mark (every array
// weft allocates), PyTorch's growth of peak resident memory (tensors and everything else).
//
//   bazel run --config=opt //bench:train_bench -- --threads=2 --steps=50 --rounds=5
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/peer.h"
#include "bench/round_ms.h"
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
    x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", std::to_string(sizes[i])}},
                   "fc" + std::to_string(i));
    if (i + 1 < sizes.size()) x = Symbol::Op("relu", {x});
  }
  return {name, Loss(x), Shape{kBatch, sizes[0]}, sizes.back()};
}

// data (T, N, I) -> 2-layer bidirectional LSTM (T, N, 2H) -> the last step (N, 2H) -> dense (N,
// 10).
Net Lstm(const std::string& name) {
  Symbol x = Symbol::Op("RNN", {Symbol::Variable("data")},
                        {{"mode", "lstm"},
                         {"state_size", std::to_string(kLstmHidden)},
                         {"num_layers", "2"},
                         {"bidirectional", "true"}},
                        "lstm");
  x = Symbol::Op("slice", {x},
                 {{"begin", "(" + std::to_string(kLstmSteps - 1) + ",)"},
                  {"end", "(" + std::to_string(kLstmSteps) + ",)"}});
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
Executor::ArrayMap MakeArgs(const Net& net, Executor::ArrayMap& grads,
                            std::map<std::string, weft::GradReq>& reqs,
                            std::vector<std::string>& params) {
  const int64_t batch = net.data.ndim() == 3 ? net.data[1] : net.data[0];
  const auto shapes =
      weft::InferArgumentShapes(net.loss.ToGraph(), {{"data", net.data}, {"label", Shape{batch}}});
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

// Today's loop: Forward, Backward, then one imperative update per parameter.
std::function<void()> BindLoop(const Net& net) {
  struct Loop {
    Executor::ArrayMap args, grads;
    std::vector<std::string> params;
    std::unique_ptr<Executor> exec;
    std::unique_ptr<weft::SGD> sgd;
  };
  auto loop = std::make_shared<Loop>();
  std::map<std::string, weft::GradReq> reqs;
  loop->args = MakeArgs(net, loop->grads, reqs, loop->params);
  loop->exec = Executor::Bind(net.loss, weft::Device::Cpu(), loop->args, loop->grads, reqs);
  loop->sgd = std::make_unique<weft::SGD>(0.01, 0.9, 0, 1.0 / loop->args.at("label").size());
  return [loop] {
    loop->exec->Forward(true);
    loop->exec->Backward();
    for (size_t i = 0; i < loop->params.size(); ++i) {
      loop->sgd->Update(static_cast<int>(i), loop->args.at(loop->params[i]),
                        loop->grads.at(loop->params[i]));
    }
  };
}

// The same step as one bound graph: weft::Trainer on data filled once, as the loop's (the LSTM's
// zero initial states as data inputs, its parameters initialized as MakeArgs does).
std::function<void()> BindTrainer(const Net& net) {
  const int64_t batch = net.data.ndim() == 3 ? net.data[1] : net.data[0];
  std::map<std::string, Shape> inputs = {{"data", net.data}, {"label", Shape{batch}}};
  const auto shapes = weft::InferArgumentShapes(net.loss.ToGraph(), inputs);
  for (const char* state : {"lstm_state", "lstm_state_cell"}) {
    if (shapes.count(state) != 0) inputs[state] = shapes.at(state);
  }
  weft::TrainerOptions options;
  options.initialize = [](const std::string& name, const NDArray& array) {
    if (name != "lstm_parameters") return false;
    weft::Uniform(1 / std::sqrt(static_cast<double>(kLstmHidden))).InitWeight(name, array);
    return true;
  };
  auto trainer = std::make_shared<weft::Trainer>(net.loss, inputs, weft::Xavier(),
                                                 weft::SGD(0.01, 0.9, 0, 1.0 / batch), options);
  std::vector<float> labels(batch);
  for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<float>(i % net.classes);
  trainer->data("label").CopyFrom(labels);
  trainer->data("data").FillNormal(0, 1);
  for (const auto& [name, shape] : inputs) {
    if (name != "data" && name != "label") trainer->data(name).Fill(0);
  }
  return [trainer] { trainer->Step(); };
}

// A bound step and what binding it and 5 untimed steps allocated at the peak.
struct Setup {
  std::function<void()> step;
  size_t peak_bytes;
};

Setup Bind(const std::function<std::function<void()>()>& bind) {
  weft::Storage& pool = *weft::Storage::Get(weft::Device::Cpu());
  weft::engine::Engine::Get()->WaitForAll();
  pool.ReleaseCache();
  pool.ResetPeak();
  const size_t base = pool.Stats().bytes_in_use;
  Setup setup{bind(), 0};
  for (int i = 0; i < 5; ++i) setup.step();
  weft::engine::Engine::Get()->WaitForAll();
  setup.peak_bytes = pool.Stats().peak_bytes_in_use - base;
  return setup;
}

// The loop and the trainer on one net, in alternating rounds (a machine shared with other work
// slows both alike): the median round of each.
std::array<Result, 2> RunWeft(const Net& net, int steps, int rounds) {
  const Setup loop = Bind([&] { return BindLoop(net); });
  const Setup trainer = Bind([&] { return BindTrainer(net); });
  std::vector<double> loop_ms, trainer_ms;
  for (int r = 0; r < rounds; ++r) {
    loop_ms.push_back(bench::RoundMs(loop.step, steps));
    trainer_ms.push_back(bench::RoundMs(trainer.step, steps));
  }
  return {Result{bench::Median(loop_ms), loop.peak_bytes},
          Result{bench::Median(trainer_ms), trainer.peak_bytes}};
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::IntFlag(argc, argv, "threads", 2);
  const int steps = bench::IntFlag(argc, argv, "steps", 50);
  const int rounds = bench::IntFlag(argc, argv, "rounds", 5);
  setenv("WEFT_CPU_WORKERS", "1", 0);  // one worker whose ops use `threads` threads, like PyTorch
  setenv("WEFT_CPU_OP_THREADS", std::to_string(threads).c_str(), 1);
  bench::ChdirToWorkspace();
  const std::vector<Net> nets = {Mlp("mlp 64-256-256-10", {64, 256, 256, 10}),
                                 Mlp("mlp 784-1024-1024-10", {784, 1024, 1024, 10}),
                                 Lstm("lstm 2x bidi H128 T32")};
  std::vector<Result> loop_results, trainer_results;
  for (const Net& net : nets) {
    const std::array<Result, 2> r = RunWeft(net, steps, rounds);
    loop_results.push_back(r[0]);
    trainer_results.push_back(r[1]);
  }
  const std::string peer_args =
      std::to_string(threads) + " " + std::to_string(steps) + " " + std::to_string(rounds);
  const nlohmann::json torch = bench::RunPeer("bench/torch_train_peer.py", peer_args);
  const bool peer = torch.value("available", false);
  std::printf(
      "training step (forward, backward, SGD update), MLPs batch %d, LSTM batch %d, %d thread(s), "
      "%d rounds of "
      "%d steps\n",
      kBatch, kLstmBatch, threads, rounds, steps);
  if (peer) {
    std::printf("PyTorch %s, %d thread(s); BLAS loaded: %s\n",
                torch["version"].get<std::string>().c_str(), torch["threads"].get<int>(),
                torch["blas"].get<std::string>().c_str());
  } else {
    std::printf("PyTorch not available: %s\n", torch.value("error", std::string("?")).c_str());
  }
  std::printf(
      "loop: Executor Forward/Backward + an imperative update per parameter; trainer: "
      "weft::Trainer::Step\n\n");
  std::printf("%-22s %8s %10s %9s %13s %14s %8s %10s %9s\n", "network", "loop ms", "trainer ms",
              "torch ms", "trainer/loop", "trainer/torch", "loop MB", "trainer MB", "torch MB");
  for (size_t i = 0; i < nets.size(); ++i) {
    const double l = loop_results[i].ms_per_step, w = trainer_results[i].ms_per_step;
    const double lm = loop_results[i].peak_bytes / 1048576.0,
                 wm = trainer_results[i].peak_bytes / 1048576.0;
    std::printf("%-22s %8.3f %10.3f ", nets[i].name.c_str(), l, w);
    if (peer) {
      const double t = torch["nets"][i]["ms_per_step"].get<double>(),
                   tm = torch["nets"][i]["peak_bytes"].get<double>() / 1048576.0;
      std::printf("%9.3f %13.2f %14.2f %8.1f %10.1f %9.1f\n", t, w / l, w / t, lm, wm, tm);
    } else {
      std::printf("%9s %13.2f %14s %8.1f %10.1f %9s\n", "n/a", w / l, "n/a", lm, wm, "n/a");
    }
  }
  weft::engine::Engine::Get()->Shutdown();
  return 0;
}
