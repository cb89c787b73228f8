// Helpers for engine tests: the engine configurations every test runs on, the fixture that
// creates the engine of each, and a watchdog that turns a deadlock into a failure with a message
// instead of a hang.
//
//   class EngineSemantics : public testing::EngineTest {};
//   TEST_P(EngineSemantics, WritesRunInPushOrder) { VarHandle v = engine_->NewVariable(); ... }
//   INSTANTIATE_TEST_SUITE_P(AllEngines, EngineSemantics,
//                            ::testing::ValuesIn(testing::AllEngineConfigs()), ...);
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace weft::testing {

struct EngineConfig {
  engine::EngineKind kind;
  int workers;
  std::string Name() const {
    return kind == engine::EngineKind::kNaive ? "Naive" : "Threaded" + std::to_string(workers);
  }
  std::unique_ptr<engine::Engine> Create() const {
    engine::EngineOptions options;
    options.cpu_workers = workers;
    options.cpu_priority_workers = 1;
    return engine::CreateEngine(kind, options);
  }
};

inline void PrintTo(const EngineConfig& config, std::ostream* os) { *os << config.Name(); }

// Naive, and threaded with 1, 2 and 8 workers.
std::vector<EngineConfig> AllEngineConfigs();

// The fixture of the engine tests: a fresh engine of the parameter's configuration per test.
class EngineTest : public ::testing::TestWithParam<EngineConfig> {
 protected:
  void SetUp() override { engine_ = GetParam().Create(); }
  bool threaded() const { return GetParam().kind == engine::EngineKind::kThreaded; }
  // Threaded with at least `workers` CPU workers.
  bool threaded_with(int workers) const { return threaded() && GetParam().workers >= workers; }
  // Pushes a small CPU op (FnProperty::kCpuSmall) named "small".
  void PushSmall(engine::SyncFn fn, engine::VarList reads, engine::VarList writes) {
    engine_->PushSync(std::move(fn), Device::Cpu(), reads, writes, engine::FnProperty::kCpuSmall, 0,
                      "small");
  }

  std::unique_ptr<engine::Engine> engine_;
};

// Aborts the process with `what` if not destroyed within `limit`.
class Watchdog {
 public:
  Watchdog(std::chrono::seconds limit, std::string what);
  ~Watchdog();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// A one-shot event with a bounded wait, for ops that must wait for each other in tests.
class Latch {
 public:
  void Open();
  // True if opened within `limit`.
  bool WaitFor(std::chrono::milliseconds limit);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Completes an async op from a thread of its own: the op hands over its OnComplete with Hand()
// and returns; the thread calls it (with `error`, if any) after `delay`. Joined on destruction.
class Completer {
 public:
  explicit Completer(std::chrono::milliseconds delay = std::chrono::milliseconds(0),
                     std::exception_ptr error = nullptr);
  ~Completer();
  void Hand(engine::OnComplete done);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<engine::OnComplete> done_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace weft::testing
