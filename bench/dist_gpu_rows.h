// dist_bench's GPU rows (a --config=cuda build; dist_gpu_rows_not_built.cc otherwise): weft's NCCL
// all-reduce (an engine op on gpu:0, started by the progress thread) against a raw ncclAllReduce
// on the same buffers, on a communicator and stream of the benchmark's own, 1 KB to 64 MB, one call
// at a time and a row of calls on different arrays, as a world of one (run without mpirun).
#pragma once

#include "distributed/communicator.h"

namespace bench {

void NcclRows(weft::dist::Communicator& world, int reps);

}  // namespace bench
