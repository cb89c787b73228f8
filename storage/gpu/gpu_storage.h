// GPU memory: a pooled allocator per device over cudaMalloc, with stream-ordered frees, and a
// pooled allocator of pinned host memory, also stream-ordered, through which copies with pageable
// host memory are staged (Storage::Copy), so that neither direction blocks the CPU. Registered at
// start-up by the CUDA build, so Storage::Get(Device::Gpu(n)) returns device n's pool.
//
// A block freed with FreeAfter(block, stream) stays reserved until the event recorded on the
// stream at that moment has completed; Alloc reclaims finished ones first. Free(block) without a
// stream orders the free after all work queued so far on the device's blocking streams (an event
// on the legacy default stream). When cudaMalloc fails the pool releases its cache and retries,
// then waits for pending frees and retries, then raises weft::Error with the size asked for and
// the bytes in use and cached.
#pragma once

#include "storage/storage.h"

namespace weft::gpu {

// Page-locked host memory (cudaHostAlloc), pooled, with stream-ordered frees (FreeAfter). For
// staging copies between host and device.
Storage* PinnedHostStorage();

}  // namespace weft::gpu
