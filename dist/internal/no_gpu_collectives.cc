// A CPU-only build: no GPU collectives (dist/internal/gpu_collectives.h).
#include "dist/internal/gpu_collectives.h"

namespace weft::dist::internal {

std::unique_ptr<GpuCollectives> MakeGpuCollectives(const GpuBootstrap&) { return nullptr; }

}  // namespace weft::dist::internal
