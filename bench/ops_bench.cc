// Operator speed against PyTorch on the CPU, in the same run, at the same thread count:
//   FullyConnected forward + backward, batch 128, 784 -> 1024
//   FullyConnected + gelu_tanh, inference, 512 rows, 768 -> 3072 (a GPT-2 MLP's first layer): the
//   activation as the layer's epilogue (act_type, what fold_activation makes of the pair) and as
//   an op of its own
//   Convolution forward + backward, batch 64, 32 -> 64 channels, 3x3, padding 1, 28x28
//   a tiny imperative op: 100,000 adds on a 1-element array, waited once at the end, in place and
//   allocating the output (engine included)
// Each figure is a median; the ratio is weft / PyTorch (lower is better for weft).
// --tiny_rounds=N measures the tiny rows N times on each side, each weft round followed at once by
// PyTorch's (a peer that stays up), and prints every pair, the worst ratio of a pair and each
// side's worst round: a process of weft's in a slow mode of its own shows there, while a slow
// stretch of the machine (these machines halve their speed for seconds at a time) slows both
// sides of a pair alike.
//
//   bazel run --config=opt //bench:ops_bench -- --threads=2 --reps=10 [--tiny_only=1]
//   [--tiny_rounds=10]
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
#include <tuple>
#include <utility>
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
std::function<void()> ForwardBackward(const std::string& name, const weft::AttrMap& attrs,
                                      std::vector<NDArray> inputs, const Shape& out_shape) {
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

// FullyConnected + gelu_tanh forward, waited: as one op (act_type, oneDNN's post-op) or two.
std::function<void()> FcGelu(bool epilogue) {
  const NDArray x = Random({512, 768}), w = Random({3072, 768}), b = Random({3072});
  const weft::Op& fc = weft::GetOp("FullyConnected");
  const weft::Op& gelu = weft::GetOp("gelu_tanh");
  const weft::Attrs plain = weft::ParseAttrs(fc, {{"num_hidden", "3072"}});
  const weft::Attrs with_act =
      weft::ParseAttrs(fc, {{"num_hidden", "3072"}, {"act_type", "gelu_tanh"}});
  const weft::Attrs none = weft::ParseAttrs(gelu, {});
  return [=, &fc, &gelu] {
    if (epilogue) {
      weft::Invoke(fc, with_act, {x, w, b});
    } else {
      weft::Invoke(gelu, none, weft::Invoke(fc, plain, {x, w, b}));
    }
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

// One round of the tiny adds, in place and allocating.
struct TinyRound {
  double inplace_us = 0, alloc_us = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// `rounds` rounds of weft's tiny adds, each kind followed at once by a round of PyTorch's from a
// peer that stays up (bench/peer.h, PeerSession), so that each pair shares the machine's speed of
// the moment; PyTorch's list stays empty when the peer does not run (`*why` then says why).
std::pair<std::vector<TinyRound>, std::vector<TinyRound>> AlternateTiny(int rounds, int threads,
                                                                        std::string* why) {
  bench::PeerSession peer("bench/torch_peer.py", std::to_string(threads) + " --serve");
  *why = peer.error();
  std::vector<TinyRound> weft(rounds), torch(rounds);
  bool peer_ran = peer.available();
  // PyTorch's round of `kind` ("inplace", "alloc") into `*us`; after a failure, peer_ran is false.
  auto theirs = [&](const char* kind, double* us) {
    if (!peer_ran) return;
    const nlohmann::json answer = peer.Ask(kind);
    const std::string key = std::string("add_") + kind + "_us";
    peer_ran = answer.contains(key);
    if (peer_ran) {
      *us = answer[key].get<double>();
    } else {
      *why = answer.dump();
    }
  };
  for (int r = 0; r < rounds; ++r) {
    weft[r].inplace_us = TinyAddUs(false);
    theirs("inplace", &torch[r].inplace_us);
    weft[r].alloc_us = TinyAddUs(true);
    theirs("alloc", &torch[r].alloc_us);
  }
  if (!peer_ran) torch.clear();
  return {weft, torch};
}

// Each round's pair, then the worst ratio of a pair and the worst round of each side.
void RoundRows(const char* what, const std::vector<TinyRound>& weft,
               const std::vector<TinyRound>& torch, double TinyRound::*field) {
  std::printf("%s, %zu rounds, weft / PyTorch in turn:", what, weft.size());
  double worst_ratio = 0, worst_weft = 0, worst_torch = 0;
  for (size_t r = 0; r < weft.size(); ++r) {
    worst_weft = std::max(worst_weft, weft[r].*field);
    if (r >= torch.size()) {
      std::printf(" %.3f", weft[r].*field);
      continue;
    }
    std::printf(" %.3f/%.3f", weft[r].*field, torch[r].*field);
    worst_torch = std::max(worst_torch, torch[r].*field);
    worst_ratio = std::max(worst_ratio, weft[r].*field / torch[r].*field);
  }
  if (torch.empty()) {
    std::printf("\n  worst weft round %.3f us\n", worst_weft);
  } else {
    std::printf("\n  worst ratio of a pair %.2f; worst rounds: weft %.3f us, PyTorch %.3f us\n",
                worst_ratio, worst_weft, worst_torch);
  }
}

void Row(const char* what, const char* unit, double weft, const nlohmann::json& torch,
         const char* key) {
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
  std::vector<TinyRound> weft_rounds = {{TinyAddUs(false), TinyAddUs(true)}}, torch_rounds;
  std::string peer_why;
  if (tiny_rounds > 1)
    std::tie(weft_rounds, torch_rounds) = AlternateTiny(tiny_rounds, threads, &peer_why);
  auto median = [](const std::vector<TinyRound>& rounds, double TinyRound::*field) {
    std::vector<double> v;
    for (const TinyRound& r : rounds) v.push_back(r.*field);
    return Median(v);
  };
  const double add_inplace = median(weft_rounds, &TinyRound::inplace_us);
  const double add_alloc = median(weft_rounds, &TinyRound::alloc_us);
  const bool tiny_only =
      bench::IntFlag(argc, argv, "tiny_only", 0) != 0;  // skip the big ops (quick overhead runs)
  const double fc =
      tiny_only ? 0
                : MedianMs(reps, ForwardBackward(
                                     "FullyConnected", {{"num_hidden", "1024"}},
                                     {Random({128, 784}), Random({1024, 784}), Random({1024})},
                                     Shape{128, 1024}));
  const double conv =
      tiny_only ? 0
                : MedianMs(std::max(3, reps / 2),
                           ForwardBackward(
                               "Convolution",
                               {{"kernel", "(3, 3)"}, {"num_filter", "64"}, {"pad", "(1, 1)"}},
                               {Random({64, 32, 28, 28}), Random({64, 32, 3, 3}), Random({64})},
                               Shape{64, 64, 28, 28}));
  const double fc_gelu = tiny_only ? 0 : MedianMs(reps, FcGelu(true));
  const double fc_then_gelu = tiny_only ? 0 : MedianMs(reps, FcGelu(false));
  nlohmann::json torch =
      bench::RunPeer("bench/torch_peer.py", std::to_string(threads) + " " + std::to_string(reps) +
                                                " " + (tiny_only ? "1" : "0"));
  if (!torch_rounds.empty() &&
      torch.value("available", false)) {  // the medians of the alternated rounds
    torch["add_inplace_us"] = median(torch_rounds, &TinyRound::inplace_us);
    torch["add_alloc_us"] = median(torch_rounds, &TinyRound::alloc_us);
  }

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
    Row("FC+gelu_tanh infer 512x768->3072, epilogue", "ms", fc_gelu, torch, "fc_gelu_ms");
    Row("FC+gelu_tanh infer 512x768->3072, two ops", "ms", fc_then_gelu, torch, "fc_gelu_ms");
  }
  Row("tiny add, in place (per op)", "us", add_inplace, torch, "add_inplace_us");
  Row("tiny add, allocating the output (per op)", "us", add_alloc, torch, "add_alloc_us");
  if (tiny_rounds > 1) {
    std::printf("\n");
    if (torch_rounds.empty()) std::printf("PyTorch's rounds not run: %s\n", peer_why.c_str());
    RoundRows("tiny add, in place", weft_rounds, torch_rounds, &TinyRound::inplace_us);
    RoundRows("tiny add, allocating", weft_rounds, torch_rounds, &TinyRound::alloc_us);
  }
  weft::engine::Engine::Get()->Shutdown();
  return 0;
}
