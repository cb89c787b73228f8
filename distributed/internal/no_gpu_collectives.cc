// A CPU-only build: no GPU collectives (distributed/internal/gpu_collectives.h).
#include "distributed/internal/gpu_collectives.h"

namespace weft::dist::internal {

std::unique_ptr<GpuCollectives> MakeGpuCollectives(const GpuBootstrap&) { return nullptr; }

}  // namespace weft::dist::internal
