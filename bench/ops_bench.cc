// Operator speed against PyTorch on the CPU, in the same run, at the same thread count:
//   FullyConnected forward + backward, batch 128, 784 -> 1024
//   Convolution forward + backward, batch 64, 32 -> 64 channels, 3x3, padding 1, 28x28
//   a tiny imperative op: 100,000 adds on a 1-element array, waited once at the end, in place and
//   allocating the output (engine included)
// Each figure is a median; the ratio is weft / PyTorch (lower is better for weft).
// --tiny_rounds=N measures the tiny rows N times on each side (weft's rounds, then PyTorch's)
// and adds the worst weft round against PyTorch's median round: a process whose engine threads
// were placed badly shows there, not only in a median.
//
//   bazel run --config=opt //bench:ops_bench -- --threads=2 --reps=10 [--tiny_only=1] [--tiny_rounds=10]
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/peer.h"
#include "engine/engine.h"
#include "ops/op.h"
#include "storage/ndarray.h"
#include "weft/imperative.h"
#include "weft/ops.h"

namespace {

using bench::MedianMs;
using weft::NDArray;
using weft::Shape;

NDArray Random(const Shape& shape) {
  NDArray a(shape);
  a.FillNormal(0, 0.1);
  return a;
}

// Forward then backward of one op, waited.
std::function<void()> ForwardBackward(const std::string& name, const weft::AttrMap& attrs, std::vector<NDArray> inputs,
                                      const Shape& out_shape) {
  const weft::Op& op = weft::GetOp(name);
  const weft::Attrs parsed = weft::ParseAttrs(op, attrs);
  NDArray dy = Random(out_shape);
  std::vector<NDArray> grads;
  for (const NDArray& in : inputs) grads.emplace_back(in.shape());
  return [=, &op] {
    std::vector<NDArray> out = weft::Invoke(op, parsed, inputs);
    weft::InvokeBackward(op, parsed, inputs, out, {dy}, grads,
                         std::vector<weft::OpReq>(inputs.size(), weft::OpReq::kWrite));
    weft::engine::Engine::Get()->WaitForAll();
  };
}

double TinyAddUs(bool allocate) {
  constexpr int kAdds = 100000;
  NDArray a(Shape{1}), b(Shape{1});
  a.Fill(0);
  b.Fill(1);
  // As the PyTorch side does: a.add_(b) in place, torch.add(a, b) allocating.
  const double ms = MedianMs(3, [&] {
    for (int i = 0; i < kAdds; ++i) {
      if (allocate) {
        NDArray c = a + b;
      } else {
        a += b;
      }
    }
    weft::engine::Engine::Get()->WaitForAll();
  });
  return ms * 1e3 / kAdds;
}

struct TinyRounds {
  std::vector<double> inplace_us, alloc_us;  // one per round
};

TinyRounds MeasureTiny(int rounds) {
  TinyRounds t;
  for (int r = 0; r < rounds; ++r) {
    t.inplace_us.push_back(TinyAddUs(false));
    t.alloc_us.push_back(TinyAddUs(true));
  }
  return t;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Every round, then the worst weft round against PyTorch's median round.
void WorstRows(const char* what, const std::vector<double>& weft, const nlohmann::json& torch, const char* key) {
  const bool peer = torch.value("available", false) && torch.contains(key);
  const std::vector<double> theirs = peer ? torch[key].get<std::vector<double>>() : std::vector<double>{};
  std::printf("%s, %zu rounds: weft", what, weft.size());
  for (double w : weft) std::printf(" %.3f", w);
  if (peer) {
    std::printf("; PyTorch");
    for (double p : theirs) std::printf(" %.3f", p);
  }
  const double worst = *std::max_element(weft.begin(), weft.end());
  if (peer) {
    std::printf("\n  worst weft %.3f us vs PyTorch median %.3f us: ratio %.2f\n", worst, Median(theirs),
                worst / Median(theirs));
  } else {
    std::printf("\n  worst weft %.3f us\n", worst);
  }
}

void Row(const char* what, const char* unit, double weft, const nlohmann::json& torch, const char* key) {
  if (torch.value("available", false)) {
    const double peer = torch[key].get<double>();
    std::printf("%-44s %10.3f %10.3f %8.2f   %s\n", what, weft, peer, weft / peer, unit);
  } else {
    std::printf("%-44s %10.3f %10s %8s   %s\n", what, weft, "n/a", "n/a", unit);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::IntFlag(argc, argv, "threads", 2);
  const int reps = bench::IntFlag(argc, argv, "reps", 10);
  // One engine worker whose ops use `threads` threads, as PyTorch runs one op at a time on
  // `threads` threads. Set before the engine starts.
  setenv("WEFT_CPU_WORKERS", "1", 0);
  setenv("WEFT_CPU_OP_THREADS", std::to_string(threads).c_str(), 1);
  // bazel run starts in the runfiles tree; the peer script is in the source tree.
  bench::ChdirToWorkspace();

  // The tiny ops first, as the PyTorch side measures them first: after the big ops, OpenMP's idle
  // threads spin for a while and would compete with the engine's threads on two cores.
  const int tiny_rounds = std::max(1, bench::IntFlag(argc, argv, "tiny_rounds", 1));
  const TinyRounds tiny = MeasureTiny(tiny_rounds);
  const double add_inplace = Median(tiny.inplace_us);
  const double add_alloc = Median(tiny.alloc_us);
  const bool tiny_only = bench::IntFlag(argc, argv, "tiny_only", 0) != 0;  // skip the big ops (quick overhead runs)
  const double fc = tiny_only
                        ? 0
                        : MedianMs(reps, ForwardBackward("FullyConnected", {{"num_hidden", "1024"}},
                                                         {Random({128, 784}), Random({1024, 784}), Random({1024})},
                                                         Shape{128, 1024}));
  const double conv =
      tiny_only
          ? 0
          : MedianMs(std::max(3, reps / 2),
                     ForwardBackward("Convolution", {{"kernel", "(3, 3)"}, {"num_filter", "64"}, {"pad", "(1, 1)"}},
                                     {Random({64, 32, 28, 28}), Random({64, 32, 3, 3}), Random({64})},
                                     Shape{64, 64, 28, 28}));
  const nlohmann::json torch =
      bench::RunPeer("bench/torch_peer.py", std::to_string(threads) + " " + std::to_string(reps) + " " +
                                                std::to_string(tiny_rounds) + " " + (tiny_only ? "1" : "0"));

  std::printf("weft vs PyTorch on the CPU, %d thread(s)\n", threads);
  if (torch.value("available", false)) {
    std::printf("PyTorch %s, %d thread(s); %s\n\n", torch["version"].get<std::string>().c_str(),
                torch["threads"].get<int>(), torch["blas"].get<std::string>().c_str());
  } else {
    std::printf("PyTorch not available: %s\n\n", torch.value("error", std::string("?")).c_str());
  }
  std::printf("%-44s %10s %10s %8s\n", "workload", "weft", "PyTorch", "ratio");
  if (!tiny_only) {
    Row("FullyConnected fwd+bwd 128x784->1024", "ms", fc, torch, "fc_ms");
    Row("Convolution fwd+bwd 64x32x28x28, 3x3 -> 64", "ms", conv, torch, "conv_ms");
  }
  Row("tiny add, in place (per op)", "us", add_inplace, torch, "add_inplace_us");
  Row("tiny add, allocating the output (per op)", "us", add_alloc, torch, "add_alloc_us");
  if (tiny_rounds > 1) {
    std::printf("\n");
    WorstRows("tiny add, in place", tiny.inplace_us, torch, "add_inplace_us_rounds");
    WorstRows("tiny add, allocating", tiny.alloc_us, torch, "add_alloc_us_rounds");
  }
  weft::engine::Engine::Get()->Shutdown();
  return 0;
}
