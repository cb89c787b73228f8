// Timing weft's asynchronous steps: a round pushes `steps` calls back to back and waits for the
// engine once, as a training loop would; a figure is the median of rounds. MeasureCpu adds the
// CPU pool's peak growth (what binding and running took beyond what was in use before).
//
//   std::vector<double> ms;
//   for (int r = 0; r < rounds; ++r) ms.push_back(bench::RoundMs(step, steps));
//   double figure = bench::Median(ms);
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "storage/storage.h"
#include "weft/profiler.h"

namespace bench {

// Milliseconds per call of `steps` calls pushed back to back and waited for once.
inline double RoundMs(const std::function<void()>& step, int steps) {
  weft::engine::Engine::Get()->WaitForAll();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  weft::engine::Engine::Get()->WaitForAll();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
             .count() /
         steps;
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Measured {
  double ms = 0;  // the median round's, per call
  size_t peak_bytes = 0;
};

// WEFT_BENCH_PROFILE=ROW=FILE (split at the last '='): the trace file for row `name` when ROW
// names it, else empty. Run with WEFT_EXEC_BULK_SIZE=1 for a span per op rather than per bulk
// segment:
//   WEFT_EXEC_BULK_SIZE=1 WEFT_BENCH_PROFILE="same, bf16-mixed=/tmp/mixed.json" \
//     bazel-bin/bench/resnet_bench --fashion_steps=1
inline std::string ProfileFileFor(const std::string& name) {
  const char* spec = std::getenv("WEFT_BENCH_PROFILE");
  if (spec == nullptr || name.empty()) return "";
  const std::string s(spec);
  const size_t eq = s.rfind('=');
  return eq != std::string::npos && s.substr(0, eq) == name ? s.substr(eq + 1) : "";
}

// Calls `make` (which binds and returns a step), `warmup` untimed steps, then `rounds` rounds of
// `steps` steps; peak_bytes is the CPU pool's high-water mark above what was in use before. The
// row `name` that WEFT_BENCH_PROFILE names runs its rounds under weft::Profiler (its figure then
// includes the profiler's cost).
inline Measured MeasureCpu(const std::function<std::function<void()>()>& make, int steps,
                           int rounds, int warmup = 2, const std::string& name = "") {
  weft::Storage& pool = *weft::Storage::Get(weft::Device::Cpu());
  weft::engine::Engine::Get()->WaitForAll();
  pool.ReleaseCache();
  pool.ResetPeak();
  const size_t base = pool.Stats().bytes_in_use;
  const std::function<void()> step = make();
  for (int i = 0; i < warmup; ++i) step();
  const std::string trace = ProfileFileFor(name);
  if (!trace.empty()) {
    weft::engine::Engine::Get()->WaitForAll();
    weft::Profiler::Start(trace);
  }
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) ms.push_back(RoundMs(step, steps));
  if (!trace.empty()) weft::Profiler::Stop();
  return {Median(ms), pool.Stats().peak_bytes_in_use - base};
}

}  // namespace bench
