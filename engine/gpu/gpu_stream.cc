#include "engine/gpu/gpu_stream.h"

#include <cstdint>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "core/gpu/cuda_check.h"
#include "core/mutex.h"

namespace weft::engine {

namespace {

constexpr int kMaxStreamIds = 64;  // the bits of StreamPoint::waited_by

// The ids of live streams, one bit each.
Mutex ids_mu;
uint64_t ids_in_use WEFT_GUARDED_BY(ids_mu) = 0;

int AcquireStreamId() {
  MutexLock lock(&ids_mu);
  for (int id = 0; id < kMaxStreamIds; ++id) {
    if ((ids_in_use & (uint64_t{1} << id)) == 0) {
      ids_in_use |= uint64_t{1} << id;
      return id;
    }
  }
  return -1;
}

void ReleaseStreamId(int id) {
  if (id < 0) return;
  MutexLock lock(&ids_mu);
  ids_in_use &= ~(uint64_t{1} << id);
}

}  // namespace

GpuStream::Handle::Handle(int device, Options options) {
  gpu::DeviceGuard guard(device);
  const unsigned flags = options.blocking ? cudaStreamDefault : cudaStreamNonBlocking;
  WEFT_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, flags, options.priority));
  id = AcquireStreamId();
}

// After the stream's work is done (GpuStream's destructor waited for it), so the id is free.
GpuStream::Handle::~Handle() {
  cudaStreamDestroy(stream);
  ReleaseStreamId(id);
}

GpuStream::GpuStream(int device, Options options)
    : device_(device),
      recording_(options.recording),
      handle_(device, options),
      batch_(handle_.stream, device, /*batching=*/!options.recording) {}

GpuStream::~GpuStream() {
  try {
    gpu::DeviceGuard guard(device_);
    try {
      Flush();
    } catch (const Error&) {
      // A failed launch was an op's, and reported to it; the stream goes anyway.
    }
    cudaStreamSynchronize(handle_.stream);
  } catch (const Error&) {
    // The device cannot be made current (it is gone): nothing left to wait for.
  }
}

void GpuStream::Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  Flush();
  WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, handle_.stream));
}

void GpuStream::Copy2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                       size_t height, cudaMemcpyKind kind) {
  Flush();
  WEFT_CUDA_CHECK(
      cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, kind, handle_.stream));
}

void GpuStream::Memset(void* dst, int value, size_t bytes) {
  Flush();
  WEFT_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, handle_.stream));
}

void GpuStream::HostFunc(cudaHostFn_t fn, void* data) {
  Flush();
  WEFT_CUDA_CHECK(cudaLaunchHostFunc(handle_.stream, fn, data));
}

void GpuStream::Record(cudaEvent_t event) {
  Flush();  // the event must follow the kernels batched so far
  WEFT_CUDA_CHECK(cudaEventRecord(event, handle_.stream));
}

void GpuStream::Wait(cudaEvent_t event) {
  WEFT_CUDA_CHECK(cudaStreamWaitEvent(handle_.stream, event, 0));
}

void GpuStream::Synchronize() {
  Flush();
  WEFT_CUDA_CHECK(cudaStreamSynchronize(handle_.stream));
}

gpu::DeviceErrorSlot GpuStream::ErrorSlot(gpu::DeviceErrorMessage message) {
  if (recording_) {
    WEFT_THROW(
        "a check of an op's input on the device cannot be recorded into a CUDA graph "
        "(its report is per call); the op must not be captured (Op::capture_barrier)");
  }
  const gpu::AcquiredRecord acquired = gpu::AcquireErrorRecord(device_, std::move(message));
  {
    SpinLockHolder lock(&errors_mu_);
    errors_.Add(acquired.record);
  }
  // Before the check's kernels; later uses find it cleared by the report of the use before.
  if (acquired.fresh) Memset(acquired.slot.first_bad, 0xff, sizeof(*acquired.slot.first_bad));
  return acquired.slot;
}

gpu::DeviceErrors GpuStream::TakeErrors() {
  SpinLockHolder lock(&errors_mu_);
  return std::move(errors_);
}

void GpuStream::RecordAfterAll(cudaEvent_t event) {
  gpu::LaunchBatch::FlushAll();
  WEFT_CUDA_CHECK(cudaEventRecord(event, cudaStreamLegacy));
}

}  // namespace weft::engine
