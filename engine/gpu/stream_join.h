// Joining work a library launched on streams of its own back to the caller's stream.
//
// The engine considers a GPU op done when an event recorded on its worker's stream after the op
// is; so every op must order all the device work it starts before that point. A library that
// queues kernels on auxiliary streams it owns (cuDNN's RNN backward data does, and does not
// always order its last kernel before the handle's stream) breaks that rule unless the op joins
// them: an event recorded on the legacy default stream (cudaStreamLegacy), which waits for all
// work queued so far on every blocking stream, auxiliary ones included, then a wait on that
// event by the worker's stream. No CPU thread waits.
//
//   stream.Library([&](cudaStream_t s) { WEFT_CUDNN_CHECK(cudnnRNNBackwardData_v8(handle, ...)); });
//   JoinLibraryStreams(stream);    // before the op returns
#pragma once

#include "engine/gpu/gpu_stream.h"

namespace weft::gpu {

// Makes `stream` wait for all work queued so far on its device's blocking streams (`stream`'s
// device must be current). Throws weft::Error on a CUDA error.
void JoinLibraryStreams(engine::GpuStream& stream);

}  // namespace weft::gpu
