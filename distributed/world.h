// ConnectWorld: the communicator of the job this process was launched in.
//
//   auto world = dist::ConnectWorld();          // mpirun -np 2 ./train  ->  ranks 0 and 1
//   if (world->rank() == 0) std::cout << world->size() << " ranks\n";
//
// Under a launcher that sets the MPI environment (mpirun's OMPI_COMM_WORLD_SIZE, or PMI_SIZE /
// PMIX_RANK from Slurm or Hydra), MPI is initialized and every collective on CPU arrays goes over
// MPI's non-blocking collectives, started and completed by one progress thread, which makes every
// MPI call of the process, so no engine worker ever blocks in MPI; in a CUDA build, collectives on
// GPU arrays go over NCCL (distributed/gpu/), bootstrapped with a unique id broadcast over MPI from
// rank 0. Without a launcher, a world of one: CPU collectives as LocalWorld's, GPU ones over NCCL
// with one rank (in a CUDA build). MPI lives as long as the communicator: one per process, and MPI
// cannot be initialized again after it is destroyed (a weft::Error).
#pragma once

#include <memory>

#include "distributed/communicator.h"

namespace weft::dist {

// True when a launcher's MPI environment is set.
bool LaunchedByMpi();

std::unique_ptr<Communicator> ConnectWorld(const CommOptions& options = CommOptions::FromEnv());

}  // namespace weft::dist
