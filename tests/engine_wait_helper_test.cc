// The engine's wait helper (engine/wait_helper.h): a thread that waits for an array runs the
// helper while it watches, so work that only the helper completes still ends the wait.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>

#include "engine/engine.h"
#include "engine/wait_helper.h"
#include "tests/engine_test_util.h"

namespace weft {
namespace {

using engine::RunContext;
using testing::Latch;
using namespace std::chrono_literals;

// Runs the work it was handed (an op's completion), once asked to help: nobody else runs it.
class Completer final : public engine::WaitHelper {
 public:
  void Hold(std::function<void()> work) {
    std::lock_guard<std::mutex> lock(mu_);
    work_ = std::move(work);
  }
  bool Help() override {
    std::function<void()> work;
    {
      std::lock_guard<std::mutex> lock(mu_);
      work.swap(work_);
    }
    if (!work) return false;
    helps_.fetch_add(1);
    work();
    return true;
  }
  int helps() const { return helps_.load(); }

 private:
  std::mutex mu_;
  std::function<void()> work_;
  std::atomic<int> helps_{0};
};

TEST(EngineWaitHelper, AWaitCompletesWorkThatOnlyTheHelperCompletes) {
  auto engine = testing::EngineConfig{engine::EngineKind::kThreaded, 2}.Create();
  Completer completer;
  ASSERT_TRUE(engine::AddWaitHelper(&completer));
  const engine::VarHandle v = engine->NewVariable();
  Latch handed;  // the op has handed its completion over: the wait starts after that
  engine->PushAsync(
      [&](RunContext, engine::OnComplete done) {
        completer.Hold([done] { done(nullptr); });
        handed.Open();
      },
      Device::Cpu(), {}, {v});
  ASSERT_TRUE(handed.WaitFor(10s));
  engine->WaitForVar(v);  // would sleep forever if the wait did not help
  EXPECT_EQ(completer.helps(), 1);
  engine::RemoveWaitHelper(&completer);
  EXPECT_FALSE(engine::HelpWhileWaiting());
}

TEST(EngineWaitHelper, OneHelperAtATimeAndRemovingAnotherChangesNothing) {
  Completer first, second;
  ASSERT_TRUE(engine::AddWaitHelper(&first));
  EXPECT_FALSE(engine::AddWaitHelper(&second));
  engine::RemoveWaitHelper(&second);  // not the one set
  first.Hold([] {});
  EXPECT_TRUE(engine::HelpWhileWaiting());  // still `first`'s
  EXPECT_EQ(first.helps(), 1);
  engine::RemoveWaitHelper(&first);
  EXPECT_TRUE(engine::AddWaitHelper(&second));
  engine::RemoveWaitHelper(&second);
}

}  // namespace
}  // namespace weft
