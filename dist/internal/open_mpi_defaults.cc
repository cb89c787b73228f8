#include "dist/internal/open_mpi_defaults.h"

#include <mpi.h>

#include <cstdlib>

namespace weft::dist::internal {

void SetOpenMpiDefaults() {
#ifdef OPEN_MPI
  setenv(kEagerLimitVariable, kEagerLimit, /*overwrite=*/0);
#endif
}

}  // namespace weft::dist::internal
