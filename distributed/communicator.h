// Communicator: the processes of a data-parallel job (ranks 0..size-1) and the collectives
// between them, on NDArrays, pushed to the engine as asynchronous ops that read and write the
// arrays' vars like any op: a collective starts when the ops pushed before it on its arrays are
// done, and the ops pushed after it on them wait for it. Push returns at once.
//
//   std::unique_ptr<dist::Communicator> world = dist::ConnectWorld();   // distributed/world.h
//   grad.WaitToRead();                                                  // not needed: ordered by
//   grad's var world->AllReduce(grad, dist::ReduceOp::kAverage);                   // pushed;
//   returns at once world->Broadcast(weight, /*root=*/0); std::vector<float> v =
//   grad.ToVector<float>();                      // waits for the all-reduce
//
// The agreed order: every rank must push the same collectives in the same order (a program
// that runs the same code on every rank does). Each collective gets the next sequence number
// when it is pushed, and is started on the transport in that order, whatever order the engine
// finds them ready in, so ranks never start different collectives at the same time.
//
// Failure: a collective that does not complete within CommOptions::timeout_seconds of its inputs
// being ready is a weft::Error naming the collective, its sequence number and the ranks; with
// abort_on_timeout (the default) the job is ended with that message (MPI_Abort, ncclCommAbort),
// so that no rank is left waiting for one that died. Not thread-safe: one thread pushes.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "storage/ndarray.h"

namespace weft::dist {

enum class ReduceOp { kSum, kAverage };

struct CommOptions {
  double timeout_seconds = 300;  // WEFT_DIST_TIMEOUT (seconds)
  bool abort_on_timeout = true;  // WEFT_DIST_ABORT_ON_TIMEOUT=0: raise the error on this rank only
  static CommOptions FromEnv();
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The rank among the processes of this host: which GPU a rank drives (one process per GPU).
  virtual int local_rank() const = 0;

  // Each array, in place, becomes the sum (or the mean) over the ranks of that array. The arrays
  // of one call travel as one collective (a bucket of small gradients): same dtype and device,
  // float32 or float64 (int32, int64 too for kSum), and the same shapes on every rank.
  virtual void AllReduce(std::span<const NDArray> arrays, ReduceOp op) = 0;
  void AllReduce(const NDArray& array, ReduceOp op) {
    AllReduce(std::span<const NDArray>(&array, 1), op);
  }
  // `array`, in place, becomes root's `array` on every rank.
  virtual void Broadcast(const NDArray& array, int root) = 0;
  // out (size * n elements, any shape) is every rank's `in` (n elements) in rank order.
  virtual void AllGather(const NDArray& in, const NDArray& out) = 0;

  // "rank 1 of 2 (mpi)": for messages and logs.
  std::string Describe() const;
  virtual const char* transport() const = 0;

 protected:
  // The checks every implementation makes before it pushes (throw weft::Error naming the call).
  void CheckAllReduce(std::span<const NDArray> arrays, ReduceOp op) const;
  void CheckBroadcast(const NDArray& array, int root) const;
  void CheckAllGather(const NDArray& in, const NDArray& out) const;
};

// A world of one, with no transport: all-reduce and broadcast leave the arrays as they are (after
// the same checks), all-gather copies.
std::unique_ptr<Communicator> LocalWorld();

// Buckets of consecutive arrays (indexes into `bytes`, in order): an array of bucket_bytes or
// more is a bucket of its own; smaller ones are packed together until a bucket reaches
// bucket_bytes. bucket_bytes 0: one array per bucket.
std::vector<std::vector<size_t>> PlanBuckets(const std::vector<size_t>& bytes, size_t bucket_bytes);

}  // namespace weft::dist
