// The progress thread's idle policy (mpi_progress.h): after each pass over the running
// collectives, whether it polls again at once, yields the core, naps, or goes back to wait for a
// hand-over. A pure function of what the passes saw, so that it is tested alone
// (tests/dist_idle_policy_test.cc) and the thread's loop only carries it out.
//
//   IdleState state;
//   if (moved) state.Moved(Clock::now()); else state.Idle();     // after each round of a pass
//   switch (DecideIdle({running, state.idle_rounds, now - state.last_moved, largest})) ...
//
// Busy, then patient, then napping: a running collective's next message is usually microseconds
// away, so the thread polls back to back for kBusyRounds rounds that found nothing (as MPI's own
// blocking calls poll); then it yields the core between passes for as long as the collectives in
// flight could take (Patience: their largest payload at 1 GB/s, at least kMinPatience); past that,
// a peer is late (saving a file, say) and naps of kNap cost no core for the whole time limit.
//
// Napping sooner is wrong: a large message between processes that cannot map each other's memory
// (Open MPI's single copy off, as on the H200 machine) moves in fragments that only MPI calls
// copy, so naps after a fixed count of rounds slowed a 64 MB all-reduce several times over. The
// command that measures it, and its figures, are in bench/README.md ("Figures moved from
// comments"):
//   mpirun -np 2 --allow-run-as-root --bind-to core
//     --mca btl_vader_single_copy_mechanism none bazel-bin/bench/dist_bench --reps=20
#pragma once

#include <chrono>
#include <cstddef>

namespace weft::dist::internal {

// What the progress thread does after a pass.
enum class IdleAction {
  kPollNow,      // busy: poll again at once
  kYield,        // patient: yield the core, then poll again
  kNap,          // a peer is late: sleep kNap, then poll again
  kWaitForWork,  // nothing runs: wait for a hand-over
};

inline constexpr int kBusyRounds = 200;  // rounds that found nothing, polled without yielding
inline constexpr std::chrono::milliseconds kMinPatience{2};
inline constexpr std::chrono::microseconds kNap{20};

// How long collectives in flight may go without moving before the thread naps: as long as
// `largest_payload_bytes` takes at 1 GB/s, at least kMinPatience.
std::chrono::nanoseconds Patience(size_t largest_payload_bytes);

// What the passes so far saw.
struct PassOutcome {
  bool running = false;  // collectives are in flight
  int idle_rounds = 0;   // rounds in a row that moved nothing (at most kBusyRounds)
  std::chrono::nanoseconds since_moved{0};  // since a round last moved anything
  size_t largest_payload_bytes = 0;         // of the collectives in flight
};

IdleAction DecideIdle(const PassOutcome& pass);

// The thread's count of rounds that moved nothing, and when one last moved.
struct IdleState {
  using Clock = std::chrono::steady_clock;
  int idle_rounds = 0;
  Clock::time_point last_moved = Clock::now();

  // After a round that started or completed a collective (at `now`), or one that did not.
  void Moved(Clock::time_point now);
  void Idle();
};

}  // namespace weft::dist::internal
