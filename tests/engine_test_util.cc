#include "tests/engine_test_util.h"

#include <cstdio>
#include <cstdlib>

namespace weft::testing {

std::vector<EngineConfig> AllEngineConfigs() {
  return {{engine::EngineKind::kNaive, 1},
          {engine::EngineKind::kThreaded, 1},
          {engine::EngineKind::kThreaded, 2},
          {engine::EngineKind::kThreaded, 8}};
}

Watchdog::Watchdog(std::chrono::seconds limit, std::string what)
    : thread_([this, limit, what = std::move(what)] {
        std::unique_lock<std::mutex> lock(mu_);
        if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
          std::fprintf(stderr, "watchdog: '%s' did not finish within %llds (deadlock?)\n",
                       what.c_str(), static_cast<long long>(limit.count()));
          std::abort();
        }
      }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Latch::Open() {
  std::lock_guard<std::mutex> lock(mu_);
  open_ = true;
  cv_.notify_all();
}

bool Latch::WaitFor(std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, limit, [this] { return open_; });
}

Completer::Completer(std::chrono::milliseconds delay, std::exception_ptr error)
    : thread_([this, delay, error] {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return done_.has_value(); });
        engine::OnComplete done = *done_;
        lock.unlock();
        std::this_thread::sleep_for(delay);
        done(error);
      }) {}

Completer::~Completer() { thread_.join(); }

void Completer::Hand(engine::OnComplete done) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ = done;
  cv_.notify_all();
}

}  // namespace weft::testing
