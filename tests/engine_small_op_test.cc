// Small CPU ops (FnProperty::kCpuSmall): one whose vars are all free at push runs at once on the
// pushing thread; otherwise it waits for its vars like any op, on a worker. Either way the
// engine's contract holds: writes in push order, errors along edges, the same results as the
// naive engine.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
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

class EngineSmallOp : public testing::EngineTest {};

TEST_P(EngineSmallOp, ReadyAtPushRunsBeforePushReturnsOnThePushingThread) {
  VarHandle a = engine_->NewVariable(), b = engine_->NewVariable();
  for (int i = 0; i < 100; ++i) {
    std::atomic<bool> ran{false};
    std::thread::id ran_on;
    int worker = 0;
    PushSmall(
        [&](RunContext run) {
          ran_on = std::this_thread::get_id();
          worker = run.worker;
          ran = true;
        },
        {a}, {b});
    const bool ran_before_push_returned = ran.load();
    engine_->WaitForVar(b);
    ASSERT_TRUE(ran_before_push_returned) << "push " << i;
    ASSERT_EQ(ran_on, std::this_thread::get_id()) << "push " << i;
    EXPECT_EQ(worker, -1) << "not a worker";
  }
}

TEST_P(EngineSmallOp, BehindAPendingWriteItRunsOnAWorkerInPushOrder) {
  if (!threaded()) GTEST_SKIP() << "the naive engine runs the gated op at its push";
  VarHandle v = engine_->NewVariable();
  Latch gate;
  std::vector<int> order;  // guarded by v: both ops write it
  engine_->PushSync(
      [&](RunContext) {
        ASSERT_TRUE(gate.WaitFor(10s));
        order.push_back(0);
      },
      kCpu, {}, {v});
  std::atomic<bool> on_pusher{false};
  const std::thread::id pusher = std::this_thread::get_id();
  PushSmall(
      [&](RunContext) {
        on_pusher = std::this_thread::get_id() == pusher;
        order.push_back(1);
      },
      {}, {v});
  gate.Open();
  engine_->WaitForVar(v);
  EXPECT_EQ(order, (std::vector<int>{0, 1}));
  EXPECT_FALSE(on_pusher.load());
}

TEST_P(EngineSmallOp, PushedInsideAnOpItRunsAfterThatOpsBody) {
  if (!threaded()) GTEST_SKIP() << "the naive engine runs nested pushes inline by design";
  VarHandle outer = engine_->NewVariable(), inner = engine_->NewVariable();
  thread_local bool in_outer_body = false;
  std::atomic<bool> nested{true}, ran{false};
  engine_->PushSync(
      [&](RunContext) {
        in_outer_body = true;
        PushSmall(
            [&](RunContext) {
              nested = in_outer_body;  // this thread's flag: set only if run inside the outer body
              ran = true;
            },
            {}, {inner});
        in_outer_body = false;
      },
      kCpu, {}, {outer});
  engine_->WaitForAll();
  EXPECT_TRUE(ran.load());
  EXPECT_FALSE(nested.load())
      << "a small op pushed from an op's body ran inside it (sharing its workspace)";
}

TEST_P(EngineSmallOp, ErrorsTravelAlongEdgesAndAreNotThrownByPush) {
  VarHandle v = engine_->NewVariable(), w = engine_->NewVariable();
  bool dependent_ran = false;
  EXPECT_NO_THROW(
      PushSmall([](RunContext) { throw std::runtime_error("small op failed"); }, {}, {v}));
  EXPECT_NO_THROW(PushSmall([&](RunContext) { dependent_ran = true; }, {v}, {w}));
  try {
    engine_->WaitForVar(w);
    ADD_FAILURE() << "the input's error did not reach the dependent op's output";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("small op failed"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(dependent_ran);
  try {
    engine_->WaitForAll();  // clears the engine's errors (whether it rethrows a reported one is
                            // WaitForAll's)
  } catch (const std::exception&) {
  }
  // Still usable: a new write clears the error.
  int value = 0;
  PushSmall([&](RunContext) { value = 7; }, {}, {v});
  EXPECT_NO_THROW(engine_->WaitForVar(v));
  EXPECT_EQ(value, 7);
}

TEST_P(EngineSmallOp, DeleteOfAFreeVarRunsItsDeleterAtOnce) {
  VarHandle v = engine_->NewVariable();
  PushSmall([](RunContext) {}, {}, {v});
  std::atomic<bool> ran{false};
  std::thread::id ran_on;
  engine_->DeleteVariable(
      [&](RunContext) {
        ran_on = std::this_thread::get_id();
        ran = true;
      },
      kCpu, v);
  const bool ran_before_delete_returned = ran.load();
  engine_->WaitForAll();
  EXPECT_TRUE(ran_before_delete_returned);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

// Threads pushing small ops on a shared var and a var of their own: each thread's writes to the
// shared var land in its push order, and none is lost.
TEST_P(EngineSmallOp, ConcurrentPushersKeepEachThreadsWriteOrder) {
  testing::Watchdog watchdog(std::chrono::seconds(120),
                             "concurrent small-op pushers on " + GetParam().Name());
  constexpr int kThreads = 4, kOps = 2000;
  VarHandle shared = engine_->NewVariable();
  std::vector<std::pair<int, int>> log;  // guarded by `shared`: every op writes it
  std::vector<VarHandle> own(kThreads);
  for (VarHandle& v : own) v = engine_->NewVariable();
  std::vector<std::thread> pushers;
  for (int t = 0; t < kThreads; ++t) {
    pushers.emplace_back([&, t] {
      for (int i = 0; i < kOps; ++i) {
        // Every fourth op is a normal one, so small ops also queue behind work on the workers.
        const FnProperty prop = i % 4 == 3 ? FnProperty::kNormal : FnProperty::kCpuSmall;
        engine_->PushSync([&log, t, i](RunContext) { log.emplace_back(t, i); }, kCpu, {},
                          {shared, own[t]}, prop);
      }
    });
  }
  for (std::thread& p : pushers) p.join();
  engine_->WaitForAll();
  ASSERT_EQ(log.size(), static_cast<size_t>(kThreads * kOps));
  std::vector<int> next(kThreads, 0);
  for (const auto& [t, i] : log) ASSERT_EQ(i, next[t]++) << "thread " << t;
}

INSTANTIATE_TEST_SUITE_P(AllEngines, EngineSmallOp,
                         ::testing::ValuesIn(testing::AllEngineConfigs()),
                         [](const auto& info) { return info.param.Name(); });

TEST(EngineSmallOpRouting, IsRejectedOnAGpu) {
  auto engine = engine::CreateEngine(engine::EngineKind::kThreaded, {});
  VarHandle v = engine->NewVariable();
  try {
    engine->PushSync([](RunContext) {}, Device::Gpu(0), {}, {v}, FnProperty::kCpuSmall, 0,
                     "small_on_gpu");
    ADD_FAILURE() << "a small CPU op on a GPU was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("small_on_gpu"), std::string::npos) << e.what();
  }
  engine->WaitForAll();
}

}  // namespace
}  // namespace weft
