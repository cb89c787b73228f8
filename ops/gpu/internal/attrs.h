// The attributes GPU computes read. The CPU files parse them into structs private to those
// files, so the GPU side reads the same attribute strings again, with the same defaults (which
// must stay equal to ops/cpu's: the attributes were validated by the CPU parser already).
#pragma once

#include <string>

#include "ops/attrs.h"
#include "ops/gpu/kernels/params.cuh"

namespace weft::gpu {

double DropoutPAttr(const Attrs& attrs);                             // Dropout's p

}  // namespace weft::gpu
