#include "tests/gpu_stream_gate.h"

#include <condition_variable>
#include <mutex>

#include "core/gpu/cuda_check.h"

namespace weft::testing {

struct StreamGate::State {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;  // guarded by mu
};

void StreamGate::WaitUntilOpen(void* holder) {
  auto* state = static_cast<std::shared_ptr<State>*>(holder);
  {
    std::unique_lock<std::mutex> lock((*state)->mu);
    (*state)->cv.wait(lock, [&] { return (*state)->open; });
  }
  delete state;
}

StreamGate::StreamGate(engine::GpuStream& stream) : state_(std::make_shared<State>()) {
  auto* holder = new std::shared_ptr<State>(state_);
  try {
    stream.HostFunc(WaitUntilOpen, holder);
  } catch (...) {
    delete holder;
    throw;
  }
}

StreamGate::StreamGate(cudaStream_t stream) : state_(std::make_shared<State>()) {
  auto* holder = new std::shared_ptr<State>(state_);
  const cudaError_t error = cudaLaunchHostFunc(stream, WaitUntilOpen, holder);
  if (error != cudaSuccess) {
    delete holder;
    gpu::ThrowCudaError(error, "cudaLaunchHostFunc(stream, WaitUntilOpen, holder)", __FILE__,
                        __LINE__);
  }
}

StreamGate::~StreamGate() { Open(); }

void StreamGate::Open() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->open = true;
  state_->cv.notify_all();
}

}  // namespace weft::testing
