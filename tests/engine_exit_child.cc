// A program that leaves work queued in the process-wide engine and then ends, for
// engine_exit_test. Modes:
//   return    pushes chains of ops (some slow) and returns from main at once
//   exit      the same, then calls std::exit(0) while work is still queued
//   failures  pushes ops that throw and never waits for them
// The engine must drain everything at exit: the counter below, destroyed after the engine
// (it was constructed first), prints how many ops ran.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace {

constexpr int kChains = 50;
constexpr int kOpsPerChain = 200;

struct RanCounter {
  std::atomic<int> ran{0};
  ~RanCounter() { std::printf("ran %d of %d\n", ran.load(), kChains * kOpsPerChain); }
} counter;  // constructed before the engine, so destroyed after it has drained

void PushChains(bool throw_some) {
  using weft::engine::RunContext;
  auto* engine = weft::engine::Engine::Get();
  std::vector<weft::engine::VarHandle> vars;
  for (int c = 0; c < kChains; ++c) vars.push_back(engine->NewVariable());
  for (int i = 0; i < kOpsPerChain; ++i) {
    for (int c = 0; c < kChains; ++c) {
      engine->PushSync(
          [i, c, throw_some](RunContext) {
            counter.ran.fetch_add(1);
            if (i % 50 == 0 && c == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            if (throw_some && i == kOpsPerChain - 1 && c % 10 == 0)
              throw std::runtime_error("op failed at exit");
          },
          weft::Device::Cpu(), {vars[(c + 1) % kChains]}, {vars[c]},
          weft::engine::FnProperty::kNormal, 0, "exit_op");
    }
  }
}

int Run(const char* mode) {
  if (std::strcmp(mode, "return") == 0) {
    PushChains(false);
    return 0;
  }
  if (std::strcmp(mode, "exit") == 0) {
    PushChains(false);
    std::exit(0);
  }
  if (std::strcmp(mode, "failures") == 0) {
    PushChains(true);
    return 0;
  }
  std::fprintf(stderr, "unknown mode '%s': expected return, exit or failures\n", mode);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc > 1 ? argv[1] : "return");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
