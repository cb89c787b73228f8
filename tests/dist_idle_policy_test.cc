// The progress thread's idle policy (distributed/internal/idle_policy.h): busy, then patient,
// then napping, while collectives run; waiting for work when none does.
#include <gtest/gtest.h>

#include <chrono>

#include "distributed/internal/idle_policy.h"

namespace weft::dist::internal {
namespace {

using namespace std::chrono_literals;

PassOutcome Running(int idle_rounds, std::chrono::nanoseconds since_moved, size_t bytes = 0) {
  return {.running = true,
          .idle_rounds = idle_rounds,
          .since_moved = since_moved,
          .largest_payload_bytes = bytes};
}

TEST(IdlePolicy, NothingRunningWaitsForWork) {
  EXPECT_EQ(DecideIdle({.running = false}), IdleAction::kWaitForWork);
  EXPECT_EQ(DecideIdle({.running = false, .idle_rounds = kBusyRounds, .since_moved = 1h}),
            IdleAction::kWaitForWork);
}

TEST(IdlePolicy, PollsAtOnceUntilBusyRoundsFoundNothing) {
  EXPECT_EQ(DecideIdle(Running(0, 0ns)), IdleAction::kPollNow);
  EXPECT_EQ(DecideIdle(Running(kBusyRounds - 1, 1h)), IdleAction::kPollNow);
  EXPECT_NE(DecideIdle(Running(kBusyRounds, 0ns)), IdleAction::kPollNow);
}

TEST(IdlePolicy, PastBusyYieldsForAtLeastMinPatience) {
  EXPECT_EQ(DecideIdle(Running(kBusyRounds, 0ns)), IdleAction::kYield);
  EXPECT_EQ(DecideIdle(Running(kBusyRounds, kMinPatience - 1ns)), IdleAction::kYield);
  EXPECT_EQ(DecideIdle(Running(kBusyRounds, kMinPatience)), IdleAction::kNap);
}

TEST(IdlePolicy, PatienceIsTheLargestPayloadAtOneGigabytePerSecond) {
  EXPECT_EQ(Patience(0), kMinPatience);
  EXPECT_EQ(Patience(1000), kMinPatience);
  EXPECT_EQ(Patience(64 << 20), std::chrono::nanoseconds(64 << 20));  // 64 MB: 67 ms
  EXPECT_EQ(DecideIdle(Running(kBusyRounds, 50ms, 64 << 20)), IdleAction::kYield);
  EXPECT_EQ(DecideIdle(Running(kBusyRounds, 70ms, 64 << 20)), IdleAction::kNap);
}

TEST(IdlePolicy, StateCountsIdleRoundsUpToBusyAndRestartsWhenARoundMoves) {
  IdleState state;
  for (int i = 0; i < 2 * kBusyRounds; ++i) state.Idle();
  EXPECT_EQ(state.idle_rounds, kBusyRounds);
  const auto now = IdleState::Clock::time_point() + 5s;
  state.Moved(now);
  EXPECT_EQ(state.idle_rounds, 0);
  EXPECT_EQ(state.last_moved, now);
  state.Idle();
  EXPECT_EQ(state.idle_rounds, 1);
  EXPECT_EQ(state.last_moved, now);
}

}  // namespace
}  // namespace weft::dist::internal
