// Open MPI's settings that weft changes for its collectives: set before MPI_Init through the
// environment (OMPI_MCA_<name>, which Open MPI reads at MPI_Init), each only where it is not set
// already, so that a user's own setting wins (an OMPI_MCA_ variable, or mpirun's --mca flag,
// which mpirun hands to the ranks as one). A system's openmpi-mca-params.conf is overridden.
//
//   btl_vader_eager_limit = 32768 (Open MPI's default 4096)
//
// Open MPI's shared-memory transport (btl/vader) sends a message at once up to its eager limit
// and a larger one by rendezvous, a round trip more. Below NbcAlgorithm::kRingFrom weft's
// all-reduce is libnbc's recursive doubling, which sends the whole buffer in one message: with 4
// KB of payload and a header, a 4 KB all-reduce crossed the default limit. Measured on 2 ranks of
// this 2-core machine (dist_bench, --mca btl_vader_eager_limit), 4096 -> 32768: MPI_Iallreduce of
// 4 KB 3.4-4.5 -> 1.3-1.7 us, of 16 KB 5.0-6.8 -> 2.1 us; MPI_Allreduce of 16 KB 8.4 -> 1.8 us;
// 64 KB and more unchanged. 32 KB is the transport's largest fragment (btl_vader_max_send_size).
#pragma once

namespace weft::dist::internal {

inline constexpr char kEagerLimitVariable[] = "OMPI_MCA_btl_vader_eager_limit";
inline constexpr char kEagerLimit[] = "32768";

// Before MPI_Init, on the progress thread. setenv must not race with a getenv on another thread:
// ConnectWorld comes first in a program, before ops run, as MPI_Init does in any MPI program.
void SetOpenMpiDefaults();

}  // namespace weft::dist::internal
