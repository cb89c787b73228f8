// A 2-rank job in which rank 1 fails, for dist_failure_test.sh. Modes:
//   hang, kill: both ranks push three all-reduces, then rank 1 stops pushing collectives and
//     blocks (in pause(), until the job is ended), or kills itself with SIGKILL, as a crashed or
//     OOM-killed process dies; rank 0 pushes a fourth all-reduce and waits for it.
//   step_hang, step_kill, step_throw: both ranks train an MLP through a Trainer with the world,
//     and in step 3 rank 1 fails inside its backward, after the gradients of the last two layers
//     were written (their all-reduces handed over) and before the first layer's: an op of its
//     backward blocks forever, kills the process, or throws a weft::Error. Rank 0 is in the
//     middle of the same step, waiting for the first layer's all-reduces (and for those of the
//     others that rank 1 had not finished when it died).
// With WEFT_DIST_TIMEOUT set, rank 0's time limit must end the job with the error; with
// WEFT_DIST_ABORT_ON_TIMEOUT=0 the error is raised on rank 0 instead, which prints
// "caught: <message>" and exits 1. A rank whose step fails with an error prints
// "rank 1: step 3 failed: <message>" and exits 1. "UNEXPECTED" means a collective that cannot
// complete did.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <string>

#include "core/error.h"
#include "distributed/world.h"
#include "tests/backward_hook_op.h"
#include "weft/weft.h"

namespace {

using namespace weft;

// What _test_fail_on_rank1's backward does, set by rank 1 before the step that fails.
enum class Failure { kNone, kHang, kKill, kThrow };
// Written by main before step 3 is pushed, read by the hook on an engine worker: atomic, so that
// no reasoning about which step's backward reads it is needed.
std::atomic<Failure> g_failure{Failure::kNone};

// An identity whose backward fails as g_failure says.
[[maybe_unused]] const bool registered = RegisterBackwardHookOp("_test_fail_on_rank1", [] {
  if (g_failure == Failure::kHang) {
    while (true) pause();
  }
  if (g_failure == Failure::kKill) raise(SIGKILL);
  if (g_failure == Failure::kThrow) WEFT_THROW("injected failure in rank 1's backward");
});

// fc1 -> the failing identity -> relu -> fc2 -> relu -> fc3 -> loss: backward writes fc3's and
// fc2's gradients before it reaches the identity, and fc1's after it.
Symbol MlpLoss() {
  Symbol x = Symbol::Op(
      "_test_fail_on_rank1",
      {Symbol::Op("FullyConnected", {Symbol::Variable("data")}, {{"num_hidden", "16"}}, "fc1")});
  x = Symbol::Op("relu", {Symbol::Op("FullyConnected", {Symbol::Op("relu", {x})},
                                     {{"num_hidden", "16"}}, "fc2")});
  x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", "4"}}, "fc3");
  return Symbol::Op("SoftmaxCrossEntropy", {x, Symbol::Variable("label")}, {}, "loss");
}

// Three steps; in the third, rank 1's backward fails as `failure` says.
int TrainAndFail(dist::Communicator& world, Failure failure) {
  Trainer trainer(MlpLoss(), {{"data", Shape{8, 6}}, {"label", Shape{8}}}, Xavier(), SGD(0.1),
                  {.communicator = &world, .bucket_bytes = 0});
  trainer.data("data").Fill(0.5);
  trainer.data("label").Fill(1);
  for (int step = 1; step <= 3; ++step) {
    if (step == 3 && world.rank() == 1) g_failure = failure;
    trainer.Step();
    try {
      for (const std::string& p : trainer.parameter_names()) trainer.parameter(p).WaitToRead();
    } catch (const std::exception& e) {
      std::printf("%s: %s\n", world.rank() == 0 ? "caught" : "rank 1: step 3 failed", e.what());
      std::fflush(stdout);
      return 1;
    }
    std::printf("rank %d: step %d done\n", world.rank(), step);
    std::fflush(stdout);
  }
  std::printf("UNEXPECTED: rank %d's step 3 completed\n", world.rank());
  return 0;
}

// Three all-reduces on both ranks, then rank 1 hangs or dies and rank 0 pushes a fourth.
int AllReduceAndFail(dist::Communicator& world, bool kill_self) {
  NDArray grad = NDArray::FromVector<float>({1, 2, 3, 4}, Shape{4});
  for (int step = 0; step < 3; ++step) world.AllReduce(grad, dist::ReduceOp::kSum);
  grad.WaitToRead();
  std::printf("rank %d: three all-reduces done\n", world.rank());
  std::fflush(stdout);
  if (world.rank() == 1) {
    if (kill_self) raise(SIGKILL);
    while (true) pause();  // never pushes the fourth; ended by the job's abort
  }
  try {
    world.AllReduce(grad, dist::ReduceOp::kSum);
    grad.WaitToRead();
    std::printf("UNEXPECTED: rank 0's fourth all-reduce completed without rank 1\n");
  } catch (const std::exception& e) {
    std::printf("caught: %s\n", e.what());
    std::fflush(stdout);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  auto world = dist::ConnectWorld();
  if (mode == "hang" || mode == "kill") return AllReduceAndFail(*world, mode == "kill");
  if (mode == "step_hang") return TrainAndFail(*world, Failure::kHang);
  if (mode == "step_kill") return TrainAndFail(*world, Failure::kKill);
  if (mode == "step_throw") return TrainAndFail(*world, Failure::kThrow);
  std::fprintf(
      stderr,
      "dist_failure_child: unknown mode '%s' (hang, kill, step_hang, step_kill, step_throw)\n",
      mode.c_str());
  return 2;
}
