// Defects found in review of the threaded engine, each kept as a test of the contract it broke.
// Timeouts here only turn a hang into a failure; nothing is timed.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <thread>

#include "engine/engine.h"
#include "tests/engine_test_util.h"

namespace weft {
namespace {

using engine::Engine;
using engine::FnProperty;
using engine::RunContext;
using engine::VarHandle;
using testing::EngineConfig;
using testing::Latch;
using namespace std::chrono_literals;

const Device kCpu = Device::Cpu();

class EngineRegression : public testing::EngineTest {};

// An op that finishes early must not stand in, in WaitForAll's count, for a slow op pushed
// before it.
TEST_P(EngineRegression, WaitForAllWaitsForEveryOpPushedBeforeIt) {
  if (!threaded_with(2)) GTEST_SKIP() << "needs two workers";
  Latch release_slow, child_done;
  std::atomic<bool> slow_done{false};
  Engine* engine = engine_.get();
  engine_->PushSync(
      [&](RunContext) {
        release_slow.WaitFor(10s);
        slow_done = true;
      },
      kCpu, {}, {engine_->NewVariable()});
  engine_->PushSync(
      [&, engine](RunContext) {
        engine->PushSync([&](RunContext) { child_done.Open(); }, kCpu, {}, {});
      },
      kCpu, {}, {});
  ASSERT_TRUE(child_done.WaitFor(10s));
  std::thread releaser([&] {
    std::this_thread::sleep_for(20ms);  // let WaitForAll start waiting first (not required)
    release_slow.Open();
  });
  engine_->WaitForAll();
  EXPECT_TRUE(slow_done.load()) << "WaitForAll returned while an op pushed before it was running";
  releaser.join();
}

// An op pushed before WaitForVar(a) that reads the failed `a` is skipped and carries the error,
// even when WaitForVar reports (and clears) a's error before the op's other input is ready.
TEST_P(EngineRegression, OpPushedBeforeWaitForVarIsSkippedOnFailedInput) {
  VarHandle a = engine_->NewVariable(), b = engine_->NewVariable(), c = engine_->NewVariable();
  std::atomic<bool> reader_ran{false};
  Latch release_c;
  if (!threaded_with(2)) release_c.Open();  // A must be able to run while c's writer waits
  engine_->PushSync([&](RunContext) { release_c.WaitFor(10s); }, kCpu, {}, {c});
  engine_->PushSync([](RunContext) { throw std::runtime_error("A failed"); }, kCpu, {}, {a});
  engine_->PushSync([&](RunContext) { reader_ran = true; }, kCpu, {a, c}, {b});
  EXPECT_THROW(engine_->WaitForVar(a), std::runtime_error);
  release_c.Open();
  EXPECT_THROW(engine_->WaitForVar(b), std::runtime_error);
  EXPECT_FALSE(reader_ran.load()) << "an op reading a failed var ran";
  engine_->WaitForAll();
}

// An op pushed from inside a running op, ready at once, is visible to idle workers.
TEST_P(EngineRegression, ReadyChildIsNotHiddenFromIdleWorkers) {
  if (!threaded_with(2)) GTEST_SKIP() << "needs two workers";
  Engine* engine = engine_.get();
  std::atomic<bool> child_ran_meanwhile{false};
  engine_->PushSync(
      [&, engine](RunContext) {
        auto child = std::make_shared<Latch>();
        engine->PushSync([child](RunContext) { child->Open(); }, kCpu, {}, {});
        child_ran_meanwhile = child->WaitFor(10s);
      },
      kCpu, {}, {});
  engine_->WaitForAll();
  EXPECT_TRUE(child_ran_meanwhile.load()) << "the ready child waited for the op that pushed it";
}

// A long chain of kAsync ops runs in a loop, not in nested calls.
TEST_P(EngineRegression, LongChainOfAsyncPropertyOpsDoesNotOverflowTheStack) {
  VarHandle v = engine_->NewVariable();
  Latch gate;
  if (!threaded_with(1)) gate.Open();
  engine_->PushSync([&](RunContext) { gate.WaitFor(10s); }, kCpu, {}, {v});
  long count = 0;
  for (int i = 0; i < 300000; ++i)
    engine_->PushSync([&](RunContext) { ++count; }, kCpu, {}, {v}, FnProperty::kAsync);
  gate.Open();
  engine_->WaitForAll();
  EXPECT_EQ(count, 300000);
}

// Two threads pushing ops on the same two vars must not each hold one the other waits for.
TEST_P(EngineRegression, ConcurrentPushersOnOverlappingVarsDoNotDeadlock) {
  testing::Watchdog watchdog(std::chrono::seconds(120), "concurrent pushers on overlapping vars");
  VarHandle a = engine_->NewVariable(), b = engine_->NewVariable();
  std::atomic<long> ran{0};
  auto pusher = [&](bool reversed) {
    for (int i = 0; i < 50000; ++i) {
      engine_->PushSync([&](RunContext) { ++ran; }, kCpu, {},
                        reversed ? engine::VarList{b, a} : engine::VarList{a, b});
    }
  };
  std::thread t1(pusher, false), t2(pusher, true);
  t1.join();
  t2.join();
  engine_->WaitForAll();
  EXPECT_EQ(ran.load(), 100000);
}

// An async op completed from a thread of its own, right before the engine is destroyed: the
// completing thread must be done with the engine before it goes (ASan checks this).
TEST_P(EngineRegression, EngineMayBeDestroyedRightAfterAForeignCompletion) {
  if (!threaded_with(1)) GTEST_SKIP() << "the naive engine waits for completion inside the push";
  for (int iter = 0; iter < 50; ++iter) {
    auto engine = GetParam().Create();
    std::optional<engine::OnComplete> done;
    Latch handed;
    engine->PushAsync(
        [&](RunContext, engine::OnComplete d) {
          done.emplace(d);
          handed.Open();
        },
        kCpu, {}, {});
    ASSERT_TRUE(handed.WaitFor(10s));
    std::thread completer([&] { (*done)(); });
    engine.reset();  // Shutdown waits for the completion, then the engine is freed
    completer.join();
  }
}

INSTANTIATE_TEST_SUITE_P(AllEngines, EngineRegression,
                         ::testing::ValuesIn(testing::AllEngineConfigs()),
                         [](const auto& info) { return info.param.Name(); });

}  // namespace
}  // namespace weft
