// Residual networks against PyTorch on the CPU, in the same run, at the same thread count:
//   - a ResNet-18 training step (CIFAR-style 3x3 stem for 32x32 inputs, batch 64, float32),
//   - the same step in bfloat16-mixed precision (TrainerOptions::precision: float32 master
//     weights, the network in bfloat16 but BatchNorm's statistics and the loss) against the same
//     PyTorch step under torch.autocast("cpu", dtype=torch.bfloat16),
//   - train_resnet's network on Fashion-MNIST-shaped batches (1x28x28, batch 128) for as many
//     steps as one epoch of its 60,000 images takes (469; --fashion_steps),
//   - ResNet-18 inference at 224x224 (ImageNet stem), batch 1 and 32: weft bound for inference,
//     which folds each BatchNorm into its convolution, against PyTorch eager and torch.jit.freeze
//     (which folds them too).
// Training: weft::Trainer (SGD, momentum 0.9, weight decay 5e-4) against torch.optim.SGD; each
// figure the median of `rounds` rounds of `steps` steps pushed back to back. Peak memory: weft's
// pooled allocator high-water mark, PyTorch's growth of peak resident memory.
//
//   bazel run --config=opt //bench:resnet_bench -- --threads=2 --steps=3 --rounds=3
//   (--peer=0 leaves PyTorch out; --only=TEXT measures only the rows whose name holds TEXT)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/cpu_peak.h"
#include "bench/peer.h"
#include "bench/round_ms.h"
#include "examples/common/resnet.h"
#include "weft/weft.h"

namespace {

using weft::NDArray;
using weft::Shape;
using weft::Symbol;

struct Row {
  std::string name;
  double ms = 0;
  size_t peak_bytes = 0;
  double conv_gflop = 0;  // the convolutions' work in a step or inference (ConvGflop)
  bool bf16 = false;      // the convolutions run in bfloat16
};

// The convolutions' GFLOP in one call of `logits` on `data` (2 flops a multiply-add, as direct
// convolution does them): the forward, and in training the weight gradient and the data gradient
// too (none for the network's input).
double ConvGflop(const Symbol& logits, const Shape& data, bool training) {
  const weft::Graph g = weft::InferShapesAndTypes(logits.ToGraph(), {{"data", data}});
  double flops = 0;
  for (uint32_t i = 0; i < g.nodes().size(); ++i) {
    const weft::Node& n = g.nodes()[i];
    if (n.is_variable() || n.op->name != "Convolution") continue;
    const Shape& out = g.shapes()[g.EntryId({i, 0})];
    const Shape& w = g.shapes()[g.EntryId(n.inputs[1])];
    const double forward = 2.0 * out.Size() * (w.Size() / w[0]);  // (F, C / G, kh, kw)
    const bool reads_input = g.nodes()[n.inputs[0].node].is_variable();
    flops += training ? (reads_input ? 2 : 3) * forward : forward;
  }
  return flops / 1e9;
}

// --only=TEXT: the rows whose name holds TEXT are measured, the others left out (their ms 0).
std::string g_only;

Row Measure(const std::string& name, const std::function<std::function<void()>()>& make, int steps,
            int rounds) {
  if (name.find(g_only) == std::string::npos) return {name};
  const bench::Measured m = bench::MeasureCpu(make, steps, rounds, 2, name);
  return {name, m.ms, m.peak_bytes};
}

// A training step of `logits` on random data of `data` with labels in [0, 10), in `precision`.
std::function<void()> TrainStep(const Symbol& logits, const Shape& data,
                                weft::Precision precision = weft::Precision::kFloat32) {
  const Symbol loss =
      Symbol::Op("SoftmaxCrossEntropy", {logits, Symbol::Variable("label")}, {}, "loss");
  auto trainer = std::make_shared<weft::Trainer>(
      loss, std::map<std::string, Shape>{{"data", data}, {"label", Shape{data[0]}}}, weft::Xavier(),
      weft::SGD(0.01, 0.9, 5e-4, 1.0 / data[0]), weft::TrainerOptions{.precision = precision});
  std::vector<float> labels(data[0]);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<float>(i % 10);
  trainer->data("label").CopyFrom(labels);
  trainer->data("data").FillNormal(0, 1);
  return [trainer] { trainer->Step(); };
}

// An inference forward of `logits` on random data, parameters as a trained network's.
std::function<void()> InferStep(const Symbol& logits, const Shape& data) {
  const auto shapes = weft::InferArgumentShapes(logits.ToGraph(), {{"data", data}});
  weft::Executor::ArrayMap args;
  weft::Xavier init;
  for (const auto& [name, shape] : shapes) {
    args[name] = NDArray(shape);
    if (name == "data") {
      args[name].FillNormal(0, 1);
    } else {
      init.Initialize(name, args[name]);
    }
  }
  std::shared_ptr<weft::Executor> exec = weft::Executor::Bind(logits, weft::Device::Cpu(), args);
  return [exec] { exec->Forward(/*is_train=*/false); };
}

void Print(const std::vector<Row>& rows, const nlohmann::json& torch) {
  const bool peer = torch.value("available", false);
  std::printf("%-28s %10s %10s %12s %11s %14s %9s %9s\n", "row", "weft ms", "torch ms", "frozen ms",
              "weft/torch", "weft/frozen", "weft MB", "torch MB");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& w = rows[i];
    if (w.ms == 0) {
      std::printf("%-28s %10s\n", w.name.c_str(), "left out");
      continue;
    }
    std::printf("%-28s %10.1f ", w.name.c_str(), w.ms);
    if (!peer) {
      std::printf("%10s %12s %11s %14s %9.1f\n", "n/a", "", "", "", w.peak_bytes / 1048576.0);
      continue;
    }
    const nlohmann::json& t = torch["rows"][i];
    const double tms = t["ms"].get<double>();
    const double frozen = t.value("frozen_ms", 0.0);
    const double tmb = t.value("peak_bytes", 0.0) / 1048576.0;
    std::printf("%10.1f ", tms);
    if (frozen > 0) {
      std::printf("%12.1f %11.2f %14.2f ", frozen, w.ms / tms, w.ms / frozen);
    } else {
      std::printf("%12s %11.2f %14s ", "", w.ms / tms, "");
    }
    std::printf("%9.1f ", w.peak_bytes / 1048576.0);
    if (t.contains("peak_bytes")) {
      std::printf("%9.1f\n", tmb);
    } else {
      std::printf("%9s\n", "");
    }
  }
}

// Each row's convolutions against this machine's measured peak: their GFLOP, the ms they take at
// the peak (no direct convolution is faster; Winograd's fewer multiplies can be), the rate weft's
// whole step or inference reaches on them, and the floor as a ratio to PyTorch's time: the lowest
// weft/torch (and weft/frozen) any implementation of direct convolutions could show in this run.
void PrintFloors(const std::vector<Row>& rows, const nlohmann::json& torch, const bench::CpuPeak& p,
                 int threads) {
  if (p.fp32_gflops == 0) return;
  std::printf(
      "\nThe convolutions against this machine's peak on %d thread(s), measured: float32 FMA "
      "%.0f GFLOP/s, bfloat16 dot products %.0f GFLOP/s\n",
      threads, p.fp32_gflops, p.bf16_gflops);
  std::printf("%-28s %10s %10s %12s %14s %12s\n", "row", "conv GFLOP", "floor ms", "weft GFLOP/s",
              "floor/torch", "floor/frozen");
  const bool peer = torch.value("available", false);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& w = rows[i];
    const double peak = w.bf16 ? p.bf16_gflops : p.fp32_gflops;
    if (w.ms == 0 || peak == 0) continue;
    const double floor_ms = w.conv_gflop / peak * 1e3;
    std::printf("%-28s %10.1f %10.1f %12.0f ", w.name.c_str(), w.conv_gflop, floor_ms,
                w.conv_gflop / w.ms * 1e3);
    const double tms = peer ? torch["rows"][i]["ms"].get<double>() : 0;
    const double frozen = peer ? torch["rows"][i].value("frozen_ms", 0.0) : 0;
    tms > 0 ? std::printf("%14.2f ", floor_ms / tms) : std::printf("%14s ", "");
    frozen > 0 ? std::printf("%12.2f\n", floor_ms / frozen) : std::printf("%12s\n", "");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::IntFlag(argc, argv, "threads", 2);
  const int steps = bench::IntFlag(argc, argv, "steps", 3);
  const int rounds = bench::IntFlag(argc, argv, "rounds", 3);
  const int fashion_steps = bench::IntFlag(argc, argv, "fashion_steps", 469);
  const bool peer = bench::IntFlag(argc, argv, "peer", 1) != 0;
  g_only = bench::StringFlag(argc, argv, "only", "");
  if (threads < 1 || steps < 1 || rounds < 1 || fashion_steps < 1) {
    std::fprintf(stderr,
                 "resnet_bench: expected --threads, --steps, --rounds and --fashion_steps "
                 "of 1 or more, found %d, %d, %d and %d\n",
                 threads, steps, rounds, fashion_steps);
    return 2;
  }
  setenv("WEFT_CPU_WORKERS", "1", 0);  // one worker whose ops use `threads` threads, like PyTorch
  setenv("WEFT_CPU_OP_THREADS", std::to_string(threads).c_str(), 1);
  bench::ChdirToWorkspace();
  using examples::ResNet;
  using examples::ResNet18;
  using examples::Stem;
  const examples::ResNetConfig fashion{Stem::kSmall, 32, {2, 2, 2}, 10};
  std::vector<Row> rows;
  for (const auto& [name, precision] :
       {std::pair{"resnet18 cifar train b64", weft::Precision::kFloat32},
        std::pair{"same, bf16-mixed", weft::Precision::kBFloat16Mixed}}) {
    rows.push_back(Measure(
        name,
        [&] {
          return TrainStep(ResNet(ResNet18(10, Stem::kSmall)), Shape{64, 3, 32, 32}, precision);
        },
        steps, rounds));
    rows.back().conv_gflop =
        ConvGflop(ResNet(ResNet18(10, Stem::kSmall)), Shape{64, 3, 32, 32}, true);
    rows.back().bf16 = precision == weft::Precision::kBFloat16Mixed;
  }
  rows.push_back(Measure(
      "fashion resnet train b128",
      [&] {
        return TrainStep(ResNet(fashion), Shape{128, 1, 28, 28});
      },
      fashion_steps, 1));
  rows.back().conv_gflop = ConvGflop(ResNet(fashion), Shape{128, 1, 28, 28}, true);
  for (int batch : {1, 32}) {
    rows.push_back(Measure(
        "resnet18 224 infer b" + std::to_string(batch),
        [&] {
          return InferStep(ResNet(ResNet18(1000, Stem::kImageNet)), Shape{batch, 3, 224, 224});
        },
        1, rounds));
    rows.back().conv_gflop =
        ConvGflop(ResNet(ResNet18(1000, Stem::kImageNet)), Shape{batch, 3, 224, 224}, false);
  }
  const nlohmann::json torch =
      peer ? bench::RunPeer("bench/torch_resnet_peer.py",
                            std::to_string(threads) + " " + std::to_string(steps) + " " +
                                std::to_string(rounds) + " " + std::to_string(fashion_steps))
           : nlohmann::json{{"available", false}, {"error", "left out (--peer=0)"}};
  std::printf(
      "ResNets on the CPU, %d thread(s): training %d rounds of %d steps (Fashion-MNIST: "
      "%d steps, one epoch at 469), inference %d rounds\n",
      threads, rounds, steps, fashion_steps, rounds);
  if (torch.value("available", false)) {
    std::printf("PyTorch %s, %d thread(s)\n", torch["version"].get<std::string>().c_str(),
                torch["threads"].get<int>());
  } else {
    std::printf("PyTorch not available: %s\n", torch.value("error", std::string("?")).c_str());
  }
  Print(rows, torch);
  PrintFloors(rows, torch, bench::MeasureCpuPeak(threads), threads);
  weft::engine::Engine::Get()->Shutdown();
  return 0;
}
