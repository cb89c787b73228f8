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
#include <functional>
#include <vector>

#include "engine/engine.h"
#include "storage/storage.h"

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

// Calls `make` (which binds and returns a step), `warmup` untimed steps, then `rounds` rounds of
// `steps` steps; peak_bytes is the CPU pool's high-water mark above what was in use before.
inline Measured MeasureCpu(const std::function<std::function<void()>()>& make, int steps,
                           int rounds, int warmup = 2) {
  weft::Storage& pool = *weft::Storage::Get(weft::Device::Cpu());
  weft::engine::Engine::Get()->WaitForAll();
  pool.ReleaseCache();
  pool.ResetPeak();
  const size_t base = pool.Stats().bytes_in_use;
  const std::function<void()> step = make();
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) ms.push_back(RoundMs(step, steps));
  return {Median(ms), pool.Stats().peak_bytes_in_use - base};
}

}  // namespace bench
