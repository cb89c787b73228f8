// Timing weft's asynchronous steps: a round pushes `steps` calls back to back and waits for the
// engine once, as a training loop would; a figure is the median of rounds.
//
//   std::vector<double> ms;
//   for (int r = 0; r < rounds; ++r) ms.push_back(bench::RoundMs(step, steps));
//   double figure = bench::Median(ms);
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "engine/engine.h"

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

}  // namespace bench
