#include "core/gpu/launch_batch.h"

#include <atomic>
#include <map>
#include <utility>
#include <vector>
#include <memory>
#include <mutex>

#include "core/env.h"
#include "core/gpu/cuda_check.h"

namespace weft::gpu {

namespace {

// One stream's chain of pending kernel nodes, and its executable graphs by chain length.
struct Batch {
  std::mutex mu;
  cudaGraph_t graph = nullptr;  // the pending chain; guarded by mu
  cudaGraphNode_t last = nullptr;
  int count = 0;
  std::map<int, cudaGraphExec_t> execs;  // by chain length; guarded by mu
};

bool Enabled() {
  static const bool enabled = GetEnvBool("WEFT_GPU_LAUNCH_BATCH", true);
  return enabled;
}

std::mutex registry_mu;
std::atomic<uint64_t> registry_generation{0};  // bumped by ForgetStream: per-thread caches go stale
std::map<cudaStream_t, std::unique_ptr<Batch>>& Registry() {
  static auto* batches = new std::map<cudaStream_t, std::unique_ptr<Batch>>;  // guarded by registry_mu
  return *batches;
}

// The stream's batch; null when `create` is false and there is none. Batches live until
// ForgetStream, so each thread caches the last one it found (usually its own worker stream's):
// flushes run before every event record, copy and library call, and should take no lock.
Batch* BatchOf(cudaStream_t stream, bool create) {
  thread_local cudaStream_t cached_stream = nullptr;
  thread_local Batch* cached = nullptr;
  thread_local uint64_t cached_generation = 0;
  const uint64_t generation = registry_generation.load(std::memory_order_acquire);
  if (stream == cached_stream && cached != nullptr && cached_generation == generation) return cached;
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = Registry().find(stream);
  if (it == Registry().end()) {
    if (!create) return nullptr;
    it = Registry().emplace(stream, std::make_unique<Batch>()).first;
  }
  cached_stream = stream, cached = it->second.get(), cached_generation = generation;
  return it->second.get();
}

void FlushLocked(Batch& b, cudaStream_t stream) {
  if (b.count == 0) return;
  cudaGraph_t graph = b.graph;
  const int count = b.count;
  b.graph = nullptr, b.last = nullptr, b.count = 0;
  cudaGraphExec_t& exec = b.execs[count];
  if (exec != nullptr) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(exec, graph, &info) != cudaSuccess) {
      cudaGetLastError();
      cudaGraphExecDestroy(exec);
      exec = nullptr;
    }
  }
  cudaError_t error = cudaSuccess;
  if (exec == nullptr) error = cudaGraphInstantiate(&exec, graph, 0);
  if (error == cudaSuccess) error = cudaGraphLaunch(exec, stream);
  cudaGraphDestroy(graph);
  if (error != cudaSuccess) ThrowCudaError(error, "launching a batch of kernels (cudaGraphLaunch)", __FILE__, __LINE__);
}

}  // namespace

void LaunchKernel(const void* kernel, dim3 grid, dim3 block, void** args, size_t shared_bytes, cudaStream_t stream) {
  if (!Enabled() || stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    WEFT_CUDA_CHECK(cudaLaunchKernel(kernel, grid, block, args, shared_bytes, stream));
    return;
  }
  Batch& b = *BatchOf(stream, /*create=*/true);
  std::lock_guard<std::mutex> lock(b.mu);
  if (b.graph == nullptr) WEFT_CUDA_CHECK(cudaGraphCreate(&b.graph, 0));
  cudaKernelNodeParams params{};
  params.func = const_cast<void*>(kernel);
  params.gridDim = grid;
  params.blockDim = block;
  params.sharedMemBytes = static_cast<unsigned>(shared_bytes);
  params.kernelParams = args;
  cudaGraphNode_t node = nullptr;
  WEFT_CUDA_CHECK(cudaGraphAddKernelNode(&node, b.graph, b.last ? &b.last : nullptr, b.last ? 1 : 0, &params));
  b.last = node;
  if (++b.count == kMaxBatch) FlushLocked(b, stream);
}

void FlushLaunches(cudaStream_t stream) {
  if (!Enabled() || stream == nullptr) return;
  if (stream == cudaStreamLegacy) {  // the legacy stream orders after every blocking stream
    std::vector<std::pair<cudaStream_t, Batch*>> all;
    {
      std::lock_guard<std::mutex> lock(registry_mu);
      for (auto& [s, b] : Registry()) all.emplace_back(s, b.get());
    }
    for (auto& [s, b] : all) {
      std::lock_guard<std::mutex> lock(b->mu);
      FlushLocked(*b, s);
    }
    return;
  }
  Batch* b = BatchOf(stream, /*create=*/false);
  if (b == nullptr) return;
  std::lock_guard<std::mutex> lock(b->mu);
  FlushLocked(*b, stream);
}

void ForgetStream(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = Registry().find(stream);
  if (it == Registry().end()) return;
  for (auto& [count, exec] : it->second->execs) cudaGraphExecDestroy(exec);
  if (it->second->graph != nullptr) cudaGraphDestroy(it->second->graph);
  Registry().erase(it);
  registry_generation.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace weft::gpu
