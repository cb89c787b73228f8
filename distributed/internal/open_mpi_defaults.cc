#include "distributed/internal/open_mpi_defaults.h"

#include <mpi.h>

#include <cstdlib>

namespace weft::dist::internal {

void SetOpenMpiDefaults() {
#ifdef OPEN_MPI
  setenv(kEagerLimitVariable, kEagerLimit, /*overwrite=*/0);
#endif
}

namespace {
// Before main: setenv then races with no other thread's getenv.
[[maybe_unused]] const bool g_set_at_load = (SetOpenMpiDefaults(), true);
}  // namespace

}  // namespace weft::dist::internal
