// A 2-rank job in which rank 1 fails after three all-reduces, for dist_failure_test.sh:
//   hang: rank 1 stops pushing collectives and blocks (in pause(), until the job is ended);
//   kill: rank 1 kills itself with SIGKILL, as a crashed or OOM-killed process dies.
// Rank 0 pushes a fourth all-reduce and waits for it. With WEFT_DIST_TIMEOUT set, its time limit
// must end the job with the error; with WEFT_DIST_ABORT_ON_TIMEOUT=0 the error is raised on rank 0
// instead, which prints "caught: <message>" and exits 1. "UNEXPECTED" means a collective that
// cannot complete did.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>

#include "dist/world.h"
#include "weft/weft.h"

int main(int argc, char** argv) {
  using namespace weft;
  const bool kill_self = argc > 1 && std::strcmp(argv[1], "kill") == 0;
  auto world = dist::ConnectWorld();
  NDArray grad = NDArray::FromVector<float>({1, 2, 3, 4}, Shape{4});
  for (int step = 0; step < 3; ++step) world->AllReduce(grad, dist::ReduceOp::kSum);
  grad.WaitToRead();
  std::printf("rank %d: three all-reduces done\n", world->rank());
  std::fflush(stdout);
  if (world->rank() == 1) {
    if (kill_self) raise(SIGKILL);
    while (true) pause();  // never pushes the fourth; ended by the job's abort
  }
  try {
    world->AllReduce(grad, dist::ReduceOp::kSum);
    grad.WaitToRead();
    std::printf("UNEXPECTED: rank 0's fourth all-reduce completed without rank 1\n");
  } catch (const std::exception& e) {
    std::printf("caught: %s\n", e.what());
    std::fflush(stdout);
    return 1;
  }
  return 0;
}
