// Errors travel along data edges: a failing op's error is stored on the vars it writes, ops that
// depend on them are skipped and pass it on, WaitForVar and WaitForAll rethrow it, unrelated vars
// are untouched, and the engine keeps working.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "tests/engine_test_util.h"

namespace weft {
namespace {

using engine::FnProperty;
using engine::RunContext;
using engine::VarHandle;
using testing::EngineConfig;

const Device kCpu = Device::Cpu();

class EngineExceptions : public ::testing::TestWithParam<EngineConfig> {
 protected:
  void SetUp() override { engine_ = GetParam().Create(); }

  // Pushes: a = f() throws; b = g(a); c = h(b) (all three affected); u = k() unrelated.
  void PushFailingChain() {
    a_ = engine_->NewVariable();
    b_ = engine_->NewVariable();
    c_ = engine_->NewVariable();
    u_ = engine_->NewVariable();
    engine_->PushSync([](RunContext) { throw std::runtime_error("f failed: bad input"); }, kCpu, {},
                      {a_});
    engine_->PushSync([this](RunContext) { ++skipped_ran_; }, kCpu, {a_}, {b_});
    engine_->PushSync([this](RunContext) { ++skipped_ran_; }, kCpu, {b_}, {c_});
    engine_->PushSync([this](RunContext) { unrelated_ = 5; }, kCpu, {}, {u_});
  }
  std::string WaitMessage(VarHandle v) {
    try {
      engine_->WaitForVar(v);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "<no error>";
  }
  std::string WaitAllMessage() {
    try {
      engine_->WaitForAll();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "<no error>";
  }

  std::unique_ptr<engine::Engine> engine_;
  VarHandle a_ = nullptr, b_ = nullptr, c_ = nullptr, u_ = nullptr;
  std::atomic<int> skipped_ran_{0};
  int unrelated_ = 0;
};

TEST_P(EngineExceptions, ErrorComesOutOfEveryAffectedVar) {
  PushFailingChain();
  EXPECT_EQ(WaitMessage(c_), "f failed: bad input");
  EXPECT_EQ(WaitMessage(b_), "f failed: bad input");
  EXPECT_EQ(WaitMessage(a_), "f failed: bad input");
  EXPECT_EQ(skipped_ran_.load(), 0) << "ops that depend on a failed op must be skipped";
  EXPECT_EQ(WaitMessage(u_), "<no error>");
  EXPECT_EQ(unrelated_, 5);
  // Each var reports the error once; WaitForAll has nothing left that nobody saw.
  EXPECT_EQ(WaitMessage(a_), "<no error>");
  EXPECT_EQ(WaitAllMessage(), "<no error>");
}

TEST_P(EngineExceptions, ErrorComesOutOfWaitForAll) {
  PushFailingChain();
  EXPECT_EQ(WaitAllMessage(), "f failed: bad input");
  EXPECT_EQ(WaitAllMessage(), "<no error>") << "WaitForAll clears the errors it reported";
  EXPECT_EQ(WaitMessage(c_), "<no error>");
  EXPECT_EQ(unrelated_, 5);
}

TEST_P(EngineExceptions, NewWorkRunsAfterAnError) {
  PushFailingChain();
  EXPECT_EQ(WaitMessage(b_), "f failed: bad input");
  // b's error was reported: a new op on b runs. a still holds its error until it is waited for.
  int value = 0;
  engine_->PushSync([&](RunContext) { value = 1; }, kCpu, {}, {b_});
  engine_->WaitForVar(b_);
  EXPECT_EQ(value, 1);
  engine_->PushSync([&](RunContext) { value = 2; }, kCpu, {a_}, {b_});
  EXPECT_EQ(WaitMessage(b_), "f failed: bad input");
  EXPECT_EQ(value, 1);
  EXPECT_EQ(WaitAllMessage(), "<no error>");  // every failure has been reported
  engine_->PushSync([&](RunContext) { value = 3; }, kCpu, {a_},
                    {b_});  // WaitForAll retired a's error
  engine_->WaitForAll();
  EXPECT_EQ(value, 3);
}

TEST_P(EngineExceptions, AsyncOpsFailThroughOnComplete) {
  VarHandle v = engine_->NewVariable(), w = engine_->NewVariable();
  testing::Completer completer(std::chrono::milliseconds(1),
                               std::make_exception_ptr(Error("device lost")));
  engine_->PushAsync([&](RunContext, engine::OnComplete done) { completer.Hand(done); }, kCpu, {},
                     {v});
  engine_->PushSync([](RunContext) {}, kCpu, {v}, {w});
  EXPECT_EQ(WaitMessage(w), "device lost");
  EXPECT_EQ(WaitMessage(v), "device lost");
  engine_->PushAsync([](RunContext, engine::OnComplete) { throw Error("launch failed"); }, kCpu, {},
                     {v});
  EXPECT_EQ(WaitMessage(v), "launch failed");
  EXPECT_EQ(WaitAllMessage(), "<no error>");
}

TEST_P(EngineExceptions, ManyFailuresInParallelEachReachTheirVars) {
  std::vector<VarHandle> vars;
  for (int i = 0; i < 200; ++i) {
    VarHandle v = engine_->NewVariable();
    vars.push_back(v);
    engine_->PushSync(
        [i](RunContext) {
          if (i % 2 == 0) throw std::runtime_error("op " + std::to_string(i));
        },
        kCpu, {}, {v});
  }
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(WaitMessage(vars[i]), i % 2 == 0 ? "op " + std::to_string(i) : "<no error>");
  }
  EXPECT_EQ(WaitAllMessage(), "<no error>");
  for (VarHandle v : vars) engine_->DeleteVariable([](RunContext) {}, kCpu, v);
  engine_->WaitForAll();
}

TEST_P(EngineExceptions, DeleterRunsOnAVarThatHoldsAnError) {
  PushFailingChain();
  bool deleted = false;
  engine_->DeleteVariable([&](RunContext) { deleted = true; }, kCpu, c_);
  EXPECT_EQ(WaitAllMessage(), "f failed: bad input");
  EXPECT_TRUE(deleted);
}

// Readers queued behind a failing write all carry its error, whatever a wait on the var does
// meanwhile: a wait pushed after them must not report the error (and clear it) before each has
// taken it. The failing write is held until every reader is queued, then released just before the
// wait is pushed, so the wait lands while the readers are being granted. The outcome is fixed by
// the engine's ordering; the repetitions only give an engine that breaks it chances to show it
// (before the fix, about one round in 600 on two cores lost some readers' errors).
TEST_P(EngineExceptions, ReadersQueuedBeforeAWaitAllCarryTheError) {
  if (GetParam().kind == engine::EngineKind::kNaive)
    GTEST_SKIP() << "the naive engine runs ops at push";
  constexpr int kRounds = 300, kReaders = 24;
  for (int round = 0; round < kRounds; ++round) {
    VarHandle v = engine_->NewVariable();
    std::vector<VarHandle> outs;
    testing::Latch go;
    engine_->PushSync(
        [&go](RunContext) {
          go.WaitFor(std::chrono::seconds(30));
          throw std::runtime_error("write failed");
        },
        kCpu, {}, {v});
    for (int r = 0; r < kReaders; ++r) {
      outs.push_back(engine_->NewVariable());
      engine_->PushSync([this](RunContext) { ++skipped_ran_; }, kCpu, {v}, {outs.back()},
                        FnProperty::kCpuSmall);
    }
    go.Open();
    ASSERT_EQ(WaitMessage(v), "write failed") << "round " << round;
    for (int r = 0; r < kReaders; ++r)
      ASSERT_EQ(WaitMessage(outs[r]), "write failed") << "round " << round << ", reader " << r;
    ASSERT_EQ(WaitAllMessage(), "<no error>");
    engine_->DeleteVariable([](RunContext) {}, kCpu, v);
    for (VarHandle o : outs) engine_->DeleteVariable([](RunContext) {}, kCpu, o);
  }
  EXPECT_EQ(skipped_ran_.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(AllEngines, EngineExceptions,
                         ::testing::ValuesIn(testing::AllEngineConfigs()),
                         [](const auto& info) { return info.param.Name(); });

}  // namespace
}  // namespace weft
