// Which devices and properties this build can run. The CPU-only build runs CPU ops; the GPU
// backend (CUDA build) extends this when it registers its workers.
#pragma once

#include "engine/engine.h"

namespace weft::engine {

// Throws weft::Error naming the op, its device and its property when no worker can run it.
void CheckRoutable(Device device, FnProperty prop, const char* name);

}  // namespace weft::engine
