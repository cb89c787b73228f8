// GpuCollectives: the collectives on GPU arrays, behind a narrow interface so that the MPI
// communicator knows no CUDA. A --config=cuda build supplies NCCL's
// (distributed/gpu/nccl_collectives.cc); a CPU-only build none (MakeGpuCollectives returns null and
// GPU arrays are a weft::Error).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>

#include "distributed/communicator.h"

namespace weft::dist::internal {

class MpiProgress;

struct GpuBootstrap {
  int rank = 0, size = 1, local_rank = 0;
  CommOptions options;
  // Numbers and runs the collectives, in one order with the CPU ones (MpiWork::test, ::cancel).
  MpiProgress* progress = nullptr;
  // Broadcasts `bytes` at `data` from rank 0 to every rank, blocking (over MPI; nothing for a
  // world of one). Collective: every rank calls it in the same order.
  std::function<void(void* data, size_t bytes)> broadcast;
};

class GpuCollectives {
 public:
  virtual ~GpuCollectives() = default;
  // As Communicator's, for arrays on a GPU (already checked).
  virtual void AllReduce(std::span<const NDArray> arrays, ReduceOp op) = 0;
  virtual void Broadcast(const NDArray& array, int root) = 0;
  virtual void AllGather(const NDArray& in, const NDArray& out) = 0;
};

std::unique_ptr<GpuCollectives> MakeGpuCollectives(const GpuBootstrap& bootstrap);

}  // namespace weft::dist::internal
