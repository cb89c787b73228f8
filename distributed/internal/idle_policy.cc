#include "distributed/internal/idle_policy.h"

#include <algorithm>

namespace weft::dist::internal {

std::chrono::nanoseconds Patience(size_t largest_payload_bytes) {
  const std::chrono::nanoseconds at_1_gb_per_s(largest_payload_bytes);  // a byte per nanosecond
  return std::max<std::chrono::nanoseconds>(kMinPatience, at_1_gb_per_s);
}

IdleAction DecideIdle(const PassOutcome& pass) {
  if (!pass.running) return IdleAction::kWaitForWork;
  if (pass.idle_rounds < kBusyRounds) return IdleAction::kPollNow;
  if (pass.since_moved < Patience(pass.largest_payload_bytes)) return IdleAction::kYield;
  return IdleAction::kNap;
}

void IdleState::Moved(Clock::time_point now) {
  idle_rounds = 0;
  last_moved = now;
}

void IdleState::Idle() { idle_rounds = std::min(idle_rounds + 1, kBusyRounds); }

}  // namespace weft::dist::internal
