// Pointwise fusion on the CPU (issue 11), in one run:
//   (a) the fusion pass's own time (FusePointwise on a typed graph): the seed's XLNet pattern with
//       CSE off (144 outputs; goal under 2 ms), and random graphs of 10,000, 20,000 and 40,000
//       nodes: microseconds per node stay flat when the pass is linear;
//   (b) the 8-op chain sigmoid(relu(x * a + b) * c - d) * e + f on 16M float32, bound for
//       inference (x -> y) and for training (a step: forward, and backward from a given dy to dx),
//       each with WEFT_USE_FUSION=1 and =0, against PyTorch eager (bench/torch_fusion_peer.py) at
//       the same thread count; GB/s count one read per input and one write per output (x, y; a
//       step also dy, dx); and the CPU time, which a machine shared with other work inflates less
//       than the wall time; fused and unfused run in turns, rep by rep, so both see the same load;
//       goal: fused at least 3x faster than unfused; --chain_m=N runs it on N Mi floats instead of
//       16 (the header line says whether the arrays fit the last-level cache: 16M floats are 64 MB,
//       which a server's L3 can hold, so the unfused ops then move no data through main memory);
//       beside it a copy of x: weft's CopyTo, and memcpy split over --threads threads (the floor);
//   (c) a training step of an MLP with bias, GELU and dropout (784-1024-1024-10, batch 128, SGD),
//       fusion on and off;
//   (d) a transformer block's pointwise groups (issue 39), inference on (rows, cols) float32 at
//       GPT sizes, (32*128, 4*128) and (32*128, 128), and at (8192, 3072): bias + gelu (tanh and
//       erf forms), and the residual + Dropout's mask (r + x * m: Dropout draws its mask outside
//       any group, an op with effects); fused, unfused, PyTorch, memcpy over --threads threads
//       of the same bytes, and the group as one hand-written loop over the same arrays (its
//       functors from ops/math, vectorized, rows split over --threads threads: what one generated
//       kernel for the group would do), timed in turns with memcpy. Goal: fused at 70% or more of
//       memcpy's bandwidth, or of the loop's where the loop is slower than memcpy (its arithmetic,
//       not memory, is then the floor); --block_shape=k runs the k-th shape only.
// Figures are medians over --reps; one engine worker whose ops use --threads threads, as PyTorch.
//
//   bazel run --config=opt //bench:fusion_bench -- --threads=2 --reps=10
//   (--pass=0, --chain=0, --block=0, --mlp=0 leave a part out; --peer=0 PyTorch)
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/fusion_graphs.h"
#include "bench/peer.h"
#include "core/error.h"
#include "graph/graph.h"
#include "ops/math/binary.h"
#include "ops/math/unary.h"
#include "passes/fuse_pointwise.h"
#include "passes/infer.h"
#include "weft/weft.h"

namespace {

using weft::Executor;
using weft::NDArray;
using weft::Shape;
using weft::Symbol;

int64_t kChainElements = int64_t{16} << 20;  // --chain_m Mi floats

double ProcessCpuMs() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

struct WallCpu {
  double wall_ms,
      cpu_ms;  // medians: the wall time, and the CPU time the process spent (all threads)
};

// One call of `step`: its wall and CPU time (on a machine shared with other work, the CPU time is
// what the call costs when it is not waiting for a core).
WallCpu TimeOnce(const std::function<void()>& step) {
  const double cpu = ProcessCpuMs();
  const auto start = std::chrono::steady_clock::now();
  step();
  return {
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
      ProcessCpuMs() - cpu};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// `fused` and `unfused` in turns, after a warm-up of each: every rep runs both, which one first
// alternating, so that both see the same load of a shared machine and their ratio is fair.
std::pair<WallCpu, WallCpu> InTurns(int reps, const std::function<void()>& fused,
                                    const std::function<void()>& unfused) {
  fused();
  unfused();
  std::vector<double> wall[2], cpu[2];
  for (int r = 0; r < reps; ++r) {
    for (int k = 0; k < 2; ++k) {
      const int which = (r + k) % 2;  // 0: fused
      const WallCpu t = TimeOnce(which == 0 ? fused : unfused);
      wall[which].push_back(t.wall_ms);
      cpu[which].push_back(t.cpu_ms);
    }
  }
  return {{Median(wall[0]), Median(cpu[0])}, {Median(wall[1]), Median(cpu[1])}};
}

// Milliseconds of FusePointwise on `symbol` typed with `shapes`; *stats gets what it made.
double PassMs(const Symbol& symbol, const std::map<std::string, Shape>& shapes, int reps,
              size_t* nodes, weft::FusionStats* stats) {
  const weft::Graph typed = weft::InferShapesAndTypes(symbol.ToGraph(), shapes);
  *nodes = typed.nodes().size();
  weft::FusePointwise(typed, stats);
  return bench::MedianMs(reps, [&] { weft::FusePointwise(typed); });
}

void PassRows(int reps) {
  size_t nodes = 0;
  weft::FusionStats stats;
  const double xlnet =
      PassMs(bench::XLNetPattern(), {{"x", Shape{32, 16}}}, reps * 10, &nodes, &stats);
  std::printf(
      "fusion pass, XLNet pattern (CSE off): %zu nodes, %zu group(s) of %zu ops, %.3f ms (goal < 2 "
      "ms)\n",
      nodes, stats.groups, stats.fused_nodes, xlnet);
  double per_node_first = 0;
  for (int n : {10000, 20000, 40000}) {
    stats = {};  // FusePointwise adds to it
    double ms = 0;
    try {
      ms = PassMs(bench::RandomGraph(n, 11), bench::RandomGraphShapes(), reps, &nodes, &stats);
    } catch (const weft::Error& e) {  // report the workload, measure the others
      std::printf("fusion pass, random graph of %d ops: error: %s\n", n, e.what());
      continue;
    }
    const double per_node = 1e3 * ms / static_cast<double>(nodes);
    if (per_node_first == 0) per_node_first = per_node;
    std::printf(
        "fusion pass, random graph: %6zu nodes, %5zu groups of %6zu ops, %8.3f ms, %.3f us/node "
        "(%.2fx the "
        "first graph's)\n",
        nodes, stats.groups, stats.fused_nodes, ms, per_node, per_node / per_node_first);
  }
}

// Fills x with values in [-2, 2].
NDArray Uniform(int64_t n) {
  NDArray a(Shape{n});
  a.FillUniform(-2, 2);
  return a;
}

// The chain bound twice with fusion on or off: for inference (no gradient: the forward keeps
// nothing for a backward) and for training (dx for a given dy).
struct BoundChain {
  std::unique_ptr<Executor> inference, training;
};

BoundChain BindChain(bool fusion, const NDArray& x, const NDArray& dx) {
  setenv("WEFT_USE_FUSION", fusion ? "1" : "0", 1);
  const Symbol chain = bench::Chain(Symbol::Variable("x"));
  BoundChain bound;
  bound.inference = Executor::Bind(chain, weft::Device::Cpu(), {{"x", x}});
  bound.training = Executor::Bind(chain, weft::Device::Cpu(), {{"x", x}}, {{"x", dx}},
                                  {{"x", weft::GradReq::kWrite}});
  unsetenv("WEFT_USE_FUSION");
  return bound;
}

struct ChainTimes {
  WallCpu fused_forward, unfused_forward, fused_step, unfused_step;  // forward; forward + backward
};

// Fused and unfused in turns (InTurns): first inference, then a training step.
ChainTimes TimeChain(int reps) {
  NDArray x = Uniform(kChainElements), dy = Uniform(kChainElements);
  NDArray fused_dx(Shape{kChainElements}), unfused_dx(Shape{kChainElements});
  BoundChain bound[2] = {BindChain(true, x, fused_dx), BindChain(false, x, unfused_dx)};
  // dy is written once into each executor's head-gradient array, which Backward then reads in
  // place (as PyTorch's autograd.grad reads its dy), not copied per step.
  for (BoundChain& b : bound) dy.CopyTo(b.training->head_grads().at(0));
  auto forward = [&](int k) {
    return [&, k] {
      bound[k].inference->Forward(/*is_train=*/false);
      bound[k].inference->outputs()[0].WaitToRead();
    };
  };
  auto step = [&](int k, NDArray& dx) {
    return [&, k] {
      bound[k].training->Forward(/*is_train=*/true);
      bound[k].training->Backward(bound[k].training->head_grads());
      dx.WaitToRead();
    };
  };
  ChainTimes t;
  std::tie(t.fused_forward, t.unfused_forward) = InTurns(reps, forward(0), forward(1));
  std::tie(t.fused_step, t.unfused_step) = InTurns(reps, step(0, fused_dx), step(1, unfused_dx));
  return t;
}

double CopyMs(int reps) {
  NDArray x = Uniform(kChainElements), y(Shape{kChainElements});
  return bench::MedianMs(reps, [&] {
    x.CopyTo(y);
    y.WaitToRead();
  });
}

// The machine's own copy of `bytes` bytes, memcpy split over `threads` threads: the floor of any
// group that reads and writes as many with that many threads (weft's CopyTo is one memcpy).
double SplitMemcpyMs(size_t bytes, int threads, int reps) {
  std::vector<char> from(bytes, 1), to(bytes, 2);
  return bench::MedianMs(reps, [&] {
    std::vector<std::thread> workers;
    for (int k = 0; k < threads; ++k) {
      workers.emplace_back([&, k] {
        const size_t begin = bytes / threads * k,
                     end = k + 1 == threads ? bytes : bytes / threads * (k + 1);
        std::memcpy(to.data() + begin, from.data() + begin, end - begin);
      });
    }
    for (std::thread& w : workers) w.join();
  });
}

// (d)'s groups as one hand-written loop each, rows [r0, r1) of (rows, cols): the functors the
// ops run (ops/math), vectorized in the clones the CPU's own loops use.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define WEFT_BENCH_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define WEFT_BENCH_CLONES
#endif
struct LoopArrays {
  const float *x, *b, *m, *r;
  float* y;
  int64_t cols;
};
// gelu (functor F) of x + b, rows [r0, r1); inlined into each clone below.
template <typename F>
[[gnu::always_inline]] inline void BiasRows(const LoopArrays& a, int64_t r0, int64_t r1) {
  for (int64_t row = r0; row < r1; ++row) {
    const float* x = a.x + row * a.cols;
    float* y = a.y + row * a.cols;
#pragma omp simd
    for (int64_t c = 0; c < a.cols; ++c) y[c] = F::Fwd(x[c] + a.b[c], 0.0f);
  }
}
WEFT_BENCH_CLONES void BiasGeluTanhLoop(const LoopArrays& a, int64_t r0, int64_t r1) {
  BiasRows<weft::fn::GeluTanh>(a, r0, r1);
}
WEFT_BENCH_CLONES void BiasGeluLoop(const LoopArrays& a, int64_t r0, int64_t r1) {
  BiasRows<weft::fn::Gelu>(a, r0, r1);
}
WEFT_BENCH_CLONES void ResidualLoop(const LoopArrays& a, int64_t r0, int64_t r1) {
  const int64_t begin = r0 * a.cols, end = r1 * a.cols;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) a.y[i] = a.r[i] + a.x[i] * a.m[i];
}

// The vector unit the CPU's elementwise loops run on: the clone the loader picks
// (WEFT_CPU_VECTOR_CLONES, ops/cpu/internal/cpu_util.h), by the same test.
const char* LoopVectors() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  if (__builtin_cpu_supports("avx512f")) return "AVX-512";
  if (__builtin_cpu_supports("avx2")) return "AVX2";
#endif
  return "the build's baseline";
}

double Gbs(double arrays, double ms) { return arrays * kChainElements * sizeof(float) / ms / 1e6; }

// `format` applied to v, or "n/a" when the peer did not run.
std::string Cell(bool available, const char* format, double v) {
  if (!available) return "n/a";
  char text[32];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

// ms fused, unfused, PyTorch; unfused / fused and PyTorch / fused; GB/s of each (`arrays` moved).
void ChainRow(const char* what, double fused, double unfused, const nlohmann::json& torch,
              const char* key, double arrays) {
  const bool peer = torch.value("available", false);
  const double t = peer ? torch[key].get<double>() : 0;
  std::printf("%-34s %9.2f %9.2f %9s %7.2fx %7s   %6.1f %6.1f %6s\n", what, fused, unfused,
              Cell(peer, "%.2f", t).c_str(), unfused / fused,
              Cell(peer, "%.2fx", t / fused).c_str(), Gbs(arrays, fused), Gbs(arrays, unfused),
              Cell(peer, "%.1f", Gbs(arrays, t)).c_str());
}

void ChainRows(int threads, int reps, bool with_peer) {
  const ChainTimes t = TimeChain(reps);
  const double copy = CopyMs(reps),
               split_copy = SplitMemcpyMs(kChainElements * sizeof(float), threads, reps);
  const nlohmann::json torch =
      with_peer ? bench::RunPeer("bench/torch_fusion_peer.py", std::to_string(threads) + " " +
                                                                   std::to_string(reps) + " " +
                                                                   std::to_string(kChainElements))
                : nlohmann::json{{"available", false}, {"error", "left out (--peer=0)"}};
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const double array_mb = kChainElements * sizeof(float) / 1e6;
  std::printf(
      "\nthe 8-op chain on %lld float32 (%lldM: %.0f MB an array, %s the %.0f MB L3), %d "
      "thread(s), loops on %s; ",
      static_cast<long long>(kChainElements), static_cast<long long>(kChainElements >> 20),
      array_mb, l3 > 0 && array_mb * 2 < l3 / 1e6 ? "two fit in" : "two exceed", l3 / 1e6, threads,
      LoopVectors());
  if (torch.value("available", false)) {
    std::printf("PyTorch %s, %d thread(s)\n", torch["version"].get<std::string>().c_str(),
                torch["threads"].get<int>());
  } else {
    std::printf("PyTorch not available: %s\n", torch.value("error", std::string("?")).c_str());
  }
  std::printf("%-34s %9s %9s %9s %8s %7s   %6s %6s %6s\n", "ms (then GB/s)", "fused", "unfused",
              "torch", "unf/fus", "tor/fus", "fused", "unfus", "torch");
  ChainRow("inference (x -> y)", t.fused_forward.wall_ms, t.unfused_forward.wall_ms, torch,
           "forward_ms", 2);
  ChainRow("training step (x, dy -> y, dx)", t.fused_step.wall_ms, t.unfused_step.wall_ms, torch,
           "step_ms", 4);
  std::printf(
      "CPU time (all threads; ms): inference %.2f fused, %.2f unfused (%.2fx); training step %.2f "
      "fused, "
      "%.2f unfused (%.2fx)\n",
      t.fused_forward.cpu_ms, t.unfused_forward.cpu_ms,
      t.unfused_forward.cpu_ms / t.fused_forward.cpu_ms, t.fused_step.cpu_ms, t.unfused_step.cpu_ms,
      t.unfused_step.cpu_ms / t.fused_step.cpu_ms);
  std::printf(
      "a copy of the %lldM floats: weft's CopyTo (one memcpy) %.2f ms, %.1f GB/s; memcpy over %d "
      "threads %.2f ms, "
      "%.1f GB/s (fused inference at %.0f%% of it)\n",
      static_cast<long long>(kChainElements >> 20), copy, Gbs(2, copy), threads, split_copy,
      Gbs(2, split_copy), 100 * split_copy / t.fused_forward.wall_ms);
}

// (d) A transformer block's pointwise groups, bound for inference on (rows, cols) float32.
struct LoopArrays;
struct BlockGroup {
  const char* name;
  weft::Symbol symbol;
  std::vector<std::string> full;  // inputs of (rows, cols); "b" is (cols,)
  const char* torch_key;
  void (*loop)(const LoopArrays&, int64_t, int64_t);  // the group as one hand-written loop
};

std::vector<BlockGroup> BlockGroups() {
  const Symbol x = Symbol::Variable("x"), b = Symbol::Variable("b");
  const Symbol biased = Symbol::Op("add", {x, b});
  const Symbol residual =
      Symbol::Op("add", {Symbol::Variable("r"), Symbol::Op("mul", {x, Symbol::Variable("m")})});
  return {
      {"bias + gelu (tanh)",
       Symbol::Op("gelu", {biased}, {{"approximate", "tanh"}}),
       {"x"},
       "bias_gelu_tanh_ms",
       BiasGeluTanhLoop},
      {"bias + gelu (erf)", Symbol::Op("gelu", {biased}), {"x"}, "bias_gelu_ms", BiasGeluLoop},
      {"residual + dropout mask", residual, {"x", "m", "r"}, "residual_dropout_ms", ResidualLoop}};
}

// `fn(r0, r1)` over rows [0, rows) split over `threads` threads, as SplitMemcpyMs splits bytes.
void SplitRows(int64_t rows, int threads, const std::function<void(int64_t, int64_t)>& fn) {
  std::vector<std::thread> workers;
  for (int k = 0; k < threads; ++k) {
    workers.emplace_back(
        [&, k] { fn(rows / threads * k, k + 1 == threads ? rows : rows / threads * (k + 1)); });
  }
  for (std::thread& w : workers) w.join();
}

// The group's hand-written loop and memcpy of the bytes it moves (`moved`), in turns, over
// `threads` threads: {loop, memcpy} medians.
std::pair<WallCpu, WallCpu> LoopAndCopyMs(const BlockGroup& group,
                                          const weft::Executor::ArrayMap& args, int64_t rows,
                                          int64_t cols, size_t moved, int threads, int reps) {
  std::map<std::string, std::vector<float>> host;
  for (const auto& [name, array] : args) host[name] = array.ToVector<float>();
  std::vector<float> y(rows * cols);
  const auto at = [&](const char* name) { return host.count(name) ? host[name].data() : nullptr; };
  const LoopArrays a{at("x"), at("b"), at("m"), at("r"), y.data(), cols};
  std::vector<char> from(moved / 2, 1), to(moved / 2, 2);
  return InTurns(
      reps,
      [&] { SplitRows(rows, threads, [&](int64_t r0, int64_t r1) { group.loop(a, r0, r1); }); },
      [&] {
        SplitRows(rows, threads, [&](int64_t r0, int64_t r1) {
          const size_t begin = from.size() * r0 / rows, end = from.size() * r1 / rows;
          std::memcpy(to.data() + begin, from.data() + begin, end - begin);
        });
      });
}

struct BlockTimes {
  WallCpu fused, unfused, loop, copy;
};

// The times of `group` bound fused and unfused (in turns), on arrays of (rows, cols), and of its
// loop and memcpy (in turns).
BlockTimes BlockGroupMs(const BlockGroup& group, int64_t rows, int64_t cols, size_t moved,
                        int threads, int reps) {
  weft::Executor::ArrayMap args;
  for (const std::string& name : group.full) {
    args[name] = NDArray(Shape{rows, cols});
    args[name].FillUniform(-2, 2);
  }
  if (group.torch_key != std::string("residual_dropout_ms")) {
    args["b"] = NDArray(Shape{cols});
    args["b"].FillUniform(-0.5, 0.5);
  }
  std::unique_ptr<Executor> bound[2];
  for (int k = 0; k < 2; ++k) {
    setenv("WEFT_USE_FUSION", k == 0 ? "1" : "0", 1);
    bound[k] = Executor::Bind(group.symbol, weft::Device::Cpu(), args);
    unsetenv("WEFT_USE_FUSION");
  }
  if (bound[0]->stats().fused_groups != 1) WEFT_THROW(group.name << ": expected one fused group");
  auto run = [&](int k) {
    return [&, k] {
      bound[k]->Forward(/*is_train=*/false);
      bound[k]->outputs()[0].WaitToRead();
    };
  };
  BlockTimes t;
  std::tie(t.fused, t.unfused) = InTurns(reps, run(0), run(1));
  std::tie(t.loop, t.copy) = LoopAndCopyMs(group, args, rows, cols, moved, threads, reps);
  return t;
}

constexpr int64_t kBlockShapes[][2] = {{32 * 128, 4 * 128}, {32 * 128, 128}, {8192, 3072}};

// `shape`: the index of one of kBlockShapes, or -1 for all.
void BlockRows(int threads, int reps, bool with_peer, int shape_only) {
  std::vector<std::pair<int64_t, int64_t>> shapes;
  std::string spec;
  for (size_t k = 0; k < std::size(kBlockShapes); ++k) {
    if (shape_only >= 0 && static_cast<size_t>(shape_only) != k) continue;
    shapes.emplace_back(kBlockShapes[k][0], kBlockShapes[k][1]);
    spec += (spec.empty() ? "" : ",") + std::to_string(shapes.back().first) + "x" +
            std::to_string(shapes.back().second);
  }
  const nlohmann::json torch = with_peer
                                   ? bench::RunPeer("bench/torch_fusion_peer.py",
                                                    std::to_string(threads) + " " +
                                                        std::to_string(reps) + " 0 --block " + spec)
                                   : nlohmann::json{{"available", false}};
  const bool peer = torch.value("available", false);
  std::printf(
      "\na transformer block's pointwise groups, float32, inference, %d thread(s); GB/s count "
      "one read per input of (rows, cols) and one write; memcpy: the same bytes over %d "
      "threads; CPU ms: all threads' CPU time (less inflated by a busy machine than the wall "
      "time)\n%-26s %11s %8s %8s %8s %7s %7s %7s %8s %8s %8s %8s\n",
      threads, threads, "group", "shape", "fused", "unfused", "torch", "unf/fus", "tor/fus", "GB/s",
      "memcpy", "of it", "CPU fus", "CPU unf");
  size_t shape = 0;
  for (const auto& [rows, cols] : shapes) {
    const double arrays_bytes = static_cast<double>(rows * cols * sizeof(float));
    for (const BlockGroup& group : BlockGroups()) {
      const double moved = arrays_bytes * static_cast<double>(group.full.size() + 1);
      const BlockTimes times =
          BlockGroupMs(group, rows, cols, static_cast<size_t>(moved), threads, reps);
      const double fused = times.fused.wall_ms, unfused = times.unfused.wall_ms;
      const double copy = times.copy.wall_ms, floor = std::max(copy, times.loop.wall_ms);
      const double t = peer ? torch["block"][shape][group.torch_key].get<double>() : 0;
      const std::string dims = std::to_string(rows) + "x" + std::to_string(cols);
      std::printf(
          "%-26s %11s %8.3f %8.3f %8s %6.2fx %7s %7.1f %8.1f %7.0f%% %8.3f %7.0f%% %8.3f %8.3f\n",
          group.name, dims.c_str(), fused, unfused, Cell(peer, "%.3f", t).c_str(), unfused / fused,
          Cell(peer, "%.2fx", t / fused).c_str(), moved / fused / 1e6, moved / copy / 1e6,
          100 * copy / fused, times.loop.wall_ms, 100 * floor / fused, times.fused.cpu_ms,
          times.unfused.cpu_ms);
    }
    ++shape;
  }
  if (!peer)
    std::printf("PyTorch not available: %s\n", torch.value("error", std::string("?")).c_str());
}

double MlpStepMs(bool fusion, int reps) {
  setenv("WEFT_USE_FUSION", fusion ? "1" : "0", 1);
  bench::TrainStep step = bench::BindGeluMlp({784, 1024, 1024, 10}, 128, weft::Device::Cpu());
  unsetenv("WEFT_USE_FUSION");
  for (int i = 0; i < 3; ++i) step.Run();
  return bench::MedianMs(reps,
                         [&] {
                           for (int i = 0; i < 5; ++i) step.Run();
                           weft::engine::Engine::Get()->WaitForAll();
                         }) /
         5;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int threads = bench::IntFlag(argc, argv, "threads", 2);
    const int reps = bench::IntFlag(argc, argv, "reps", 10);
    kChainElements = int64_t{bench::IntFlag(argc, argv, "chain_m", 16)} << 20;
    setenv("WEFT_CPU_WORKERS", "1", 0);
    setenv("WEFT_CPU_OP_THREADS", std::to_string(threads).c_str(), 1);
    bench::ChdirToWorkspace();
    if (bench::IntFlag(argc, argv, "pass", 1)) PassRows(reps);
    if (bench::IntFlag(argc, argv, "chain", 1))
      ChainRows(threads, reps, bench::IntFlag(argc, argv, "peer", 1) != 0);
    if (bench::IntFlag(argc, argv, "block", 1))
      BlockRows(threads, reps, bench::IntFlag(argc, argv, "peer", 1) != 0,
                bench::IntFlag(argc, argv, "block_shape", -1));
    if (bench::IntFlag(argc, argv, "mlp", 1)) {
      const double on = MlpStepMs(true, reps), off = MlpStepMs(false, reps);
      std::printf(
          "\nMLP 784-1024-1024-10 (bias, GELU, dropout 0.1), batch 128, SGD: a training step %.3f "
          "ms fused, "
          "%.3f ms unfused (%.2fx)\n",
          on, off, off / on);
    }
    weft::engine::Engine::Get()->Shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
