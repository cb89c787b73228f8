#include "ops/gpu/library_handles.h"

#include <map>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

#include "core/gpu/cuda_check.h"
#include "core/mutex.h"
#include "core/no_destructor.h"
#include "engine/gpu/recorded_work.h"

namespace weft::gpu {

void ThrowCudnnError(cudnnStatus_t status, const char* call, const char* file, int line) {
  std::ostringstream os;
  os << file << ":" << line << ": cuDNN error: " << call << ": " << cudnnGetErrorString(status);
  throw Error(os.str());
}

void ThrowCublasError(cublasStatus_t status, const char* call, const char* file, int line) {
  std::ostringstream os;
  os << file << ":" << line << ": cuBLAS error: " << call << ": " << cublasGetStatusName(status)
     << ": " << cublasGetStatusString(status);
  throw Error(os.str());
}

namespace {

// How each library makes a handle and binds it to a stream.
template <typename H>
struct HandleTraits;

template <>
struct HandleTraits<cudnnHandle_t> {
  static cudnnHandle_t Create() {
    cudnnHandle_t h = nullptr;
    WEFT_CUDNN_CHECK(cudnnCreate(&h));
    return h;
  }
  static void Bind(cudnnHandle_t h, cudaStream_t stream) {
    WEFT_CUDNN_CHECK(cudnnSetStream(h, stream));
  }
};

template <>
struct HandleTraits<cublasHandle_t> {
  static cublasHandle_t Create() {
    cublasHandle_t h = nullptr;
    WEFT_CUBLAS_CHECK(cublasCreate(&h));
    return h;
  }
  static void Bind(cublasHandle_t h, cudaStream_t stream) {
    WEFT_CUBLAS_CHECK(cublasSetStream(h, stream));
  }
};

// The handles no thread holds, per device. Process-wide and never destroyed (see the header), so
// a thread that exits during process teardown can still give its handles back.
template <typename H>
class HandlePool {
 public:
  static HandlePool& Get() {
    static NoDestructor<HandlePool> pool;  // outlives every thread_local
    return *pool;
  }

  // An idle handle of `device`, or a new one; `device` must be current.
  H Acquire(int device) {
    {
      MutexLock lock(&mu_);
      std::vector<H>& idle = idle_[device];
      if (!idle.empty()) {
        const H h = idle.back();
        idle.pop_back();
        return h;
      }
    }
    return HandleTraits<H>::Create();
  }

  void Release(int device, H h) {
    MutexLock lock(&mu_);
    idle_[device].push_back(h);
  }

 private:
  Mutex mu_;
  std::map<int, std::vector<H>> idle_ WEFT_GUARDED_BY(mu_);
};

// The handles one thread holds, one per (device, stream); given back to the pool when the thread
// exits. Only its own thread touches it.
template <typename H>
class ThreadHandles {
 public:
  ThreadHandles() = default;
  ThreadHandles(const ThreadHandles&) = delete;
  ThreadHandles& operator=(const ThreadHandles&) = delete;
  ~ThreadHandles() {
    for (const Held& held : held_) HandlePool<H>::Get().Release(held.device, held.handle);
  }

  H For(int device, cudaStream_t stream) {
    for (const Held& held : held_) {  // a few entries: one per stream this thread uses
      if (held.device == device && held.stream == stream) return held.handle;
    }
    DeviceGuard guard(device);
    const H h = HandlePool<H>::Get().Acquire(device);
    try {
      HandleTraits<H>::Bind(h, stream);
    } catch (...) {
      HandlePool<H>::Get().Release(device, h);
      throw;
    }
    held_.push_back({device, stream, h});
    return h;
  }

 private:
  struct Held {
    int device;
    cudaStream_t stream;
    H handle;
  };
  std::vector<Held> held_;
};

template <typename H>
H HandleFor(int device, cudaStream_t stream) {
  thread_local ThreadHandles<H> handles;
  return handles.For(device, stream);
}

}  // namespace

cudnnHandle_t CudnnHandleFor(int device, cudaStream_t stream) {
  return HandleFor<cudnnHandle_t>(device, stream);
}

cublasHandle_t CublasHandleFor(int device, cudaStream_t stream) {
  return HandleFor<cublasHandle_t>(device, stream);
}

namespace {
// Making a handle allocates, which a capture forbids: a recording stream gets its handles first.
[[maybe_unused]] const bool recording_streams_get_handles = [] {
  OnNewRecordingStream([](engine::GpuStream& stream) {
    stream.Library([&](cudaStream_t s) {
      CudnnHandleFor(stream.device(), s);
      CublasHandleFor(stream.device(), s);
    });
  });
  return true;
}();
}  // namespace

}  // namespace weft::gpu
