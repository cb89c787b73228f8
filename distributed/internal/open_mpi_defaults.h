// Open MPI's settings that weft changes for its collectives: set through the environment
// (OMPI_MCA_<name>, which Open MPI reads at MPI_Init) when a program that links //distributed
// starts, before main, while no other thread can read the environment; each only where it is not
// set already, so that a user's OMPI_MCA_ variable or mpirun --mca flag (which mpirun hands to the
// ranks as one) wins. A parameter file's setting (the system's, ~/.openmpi/mca-params.conf) does
// not: Open MPI ranks the environment above the files, so set these in the environment.
//
//   btl_vader_eager_limit = 32768 (Open MPI's default 4096)
//
// Open MPI's shared-memory transport (btl/vader) sends a message at once up to its eager limit
// and a larger one by rendezvous, a round trip more. Below NbcAlgorithm::kRingFrom weft's
// all-reduce is libnbc's recursive doubling, which sends the whole buffer in one message: with 4
// KB of payload and a header, a 4 KB all-reduce crossed the default limit; 32768 took 4 and 16 KB
// all-reduces to a fraction of their time, larger ones unchanged. Measured on 2 ranks with
// dist_bench, the limit set each way (figures in bench/README.md, "Figures moved from comments"):
//   mpirun -np 2 --allow-run-as-root --bind-to core --mca btl_vader_eager_limit 4096
//     bazel-bin/bench/dist_bench
// 32 KB is the transport's largest fragment (btl_vader_max_send_size).
#pragma once

namespace weft::dist::internal {

inline constexpr char kEagerLimitVariable[] = "OMPI_MCA_btl_vader_eager_limit";
inline constexpr char kEagerLimit[] = "32768";

// Sets them (nothing for another MPI). Called at load; MPI_Init's caller calls it again, which
// only matters if the program removed one since.
void SetOpenMpiDefaults();

}  // namespace weft::dist::internal
