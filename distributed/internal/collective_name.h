// CollectiveName: what a collective is, for its messages ("all-reduce (sum of 1024 float32 in 2
// arrays)", "broadcast (4096 bytes from rank 0 on gpu:0, nccl)"). The facts are kept and the text
// is made only when a message needs it (a failure, a time-out): a small all-reduce takes about a
// microsecond, and formatting its name on every call cost a tenth of that. One format for the
// MPI and the NCCL collectives' time-outs and MPI's errors. PayloadBytes tells the progress
// thread how long a collective may take.
#pragma once

#include <cstddef>
#include <string>

#include "core/dtype.h"
#include "distributed/communicator.h"

namespace weft::dist::internal {

struct CollectiveName {
  enum class Kind : unsigned char { kAllReduce, kBroadcast, kAllGather };
  Kind kind = Kind::kAllReduce;
  ReduceOp op = ReduceOp::kSum;   // all-reduce
  size_t elements = 0;            // all-reduce: in all its arrays
  DType dtype = DType::kFloat32;  // all-reduce
  size_t arrays = 1;              // all-reduce
  size_t bytes = 0;               // broadcast: the array; all-gather: per rank
  int root = 0;                   // broadcast
  int gpu = -1;                   // NCCL's device; -1: on the CPU, over MPI

  static CollectiveName AllReduce(ReduceOp op, size_t elements, DType dtype, size_t arrays,
                                  int gpu = -1) {
    return {Kind::kAllReduce, op, elements, dtype, arrays, 0, 0, gpu};
  }
  static CollectiveName Broadcast(size_t bytes, int root, int gpu = -1) {
    return {Kind::kBroadcast, ReduceOp::kSum, 0, DType::kFloat32, 1, bytes, root, gpu};
  }
  static CollectiveName AllGather(size_t bytes, int gpu = -1) {
    return {Kind::kAllGather, ReduceOp::kSum, 0, DType::kFloat32, 1, bytes, 0, gpu};
  }
  std::string ToString() const;
  // The bytes each rank sends (all-reduce: its arrays; broadcast: the array; all-gather: its part).
  size_t PayloadBytes() const {
    return kind == Kind::kAllReduce ? elements * DTypeSize(dtype) : bytes;
  }
};

}  // namespace weft::dist::internal
