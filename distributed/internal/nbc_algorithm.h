// NbcAlgorithm: the algorithm Open MPI's non-blocking collectives (coll/libnbc) use for an
// all-reduce, chosen per call by its size, through MPI's tools interface (MPI_T control variables).
//
// Why: libnbc picks its binomial tree (reduce to rank 0, then broadcast) for every in-place
// all-reduce, and weft's are in place. The tree moves the whole buffer twice per level, one way
// at a time. From kRingFrom bytes the ring (a reduce-scatter, then an all-gather) sends and
// receives 2(p-1)/p of it per rank, both ways at once: with 2 ranks the tree made MPI_Iallreduce
// several times MPI_Allreduce's time from 1 MB, and the ring matches MPI_Allreduce. Below it,
// where latency rules, recursive doubling (each rank exchanges the whole buffer with one partner
// per level: one level for 2 ranks, against the tree's two) is faster than the tree. Measured by
// dist_bench's MPI_Iallreduce column (figures in bench/README.md, "Figures moved from comments"):
//   mpirun -np 2 --allow-run-as-root --bind-to core bazel-bin/bench/dist_bench --reps=10
// Both keep the order of the operands the same on every rank, so every rank gets the same bits.
//
// Only Open MPI has the control variable: elsewhere (MPICH, ...) Available() is false and every
// call is left to the library. A user's own setting wins: when the variable does not start at 0
// ("ignore", libnbc's default; an OMPI_MCA_coll_libnbc_iallreduce_algorithm or a --mca flag set
// it), weft never writes it. Used by the progress thread only (the MPI calls' one thread).
#pragma once

#include <mpi.h>

#include <cstddef>

namespace weft::dist::internal {

class NbcAlgorithm {
 public:
  static constexpr size_t kRingFrom = 64 << 10;  // bytes; libnbc's own threshold for the tree
  static constexpr int kDefault = 0;             // libnbc's values: 0 ignore (its own choice),
  static constexpr int kRing = 1;                // 1 ring, 2 binomial, 3 rabenseifner,
  static constexpr int kRecursiveDoubling = 4;   // 4 recursive doubling

  NbcAlgorithm() = default;  // not connected: Available() false
  // After MPI_Init: opens the tools interface and finds the variable. Never throws: without the
  // variable (or with a user's setting) it stays unavailable.
  static NbcAlgorithm Connect();
  // Before MPI_Finalize.
  void Close();

  bool Available() const { return handle_ != MPI_T_CVAR_HANDLE_NULL; }
  // The algorithm value an all-reduce of `bytes` gets (kRing from kRingFrom, else
  // kRecursiveDoubling).
  static int ForAllReduce(size_t bytes) { return bytes >= kRingFrom ? kRing : kRecursiveDoubling; }
  // Sets the variable for the next MPI_Iallreduce of `bytes` (nothing when unavailable).
  void BeforeAllReduce(size_t bytes);
  // The variable's value now (-1 when unavailable): for tests.
  int Current() const;

 private:
  MPI_T_cvar_handle handle_ = MPI_T_CVAR_HANDLE_NULL;
  int written_ = kDefault;
  bool tools_open_ = false;
};

}  // namespace weft::dist::internal
