#include "core/gpu/launch_batch.h"

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "core/gpu/cuda_check.h"

namespace weft::gpu {

namespace {

// A kernel waiting in a batch: its launch configuration, and its arguments copied into the
// batch's argument bytes (from `arg_begin`, one kArgAlign-aligned slot per argument).
struct PendingKernel {
  const void* kernel;
  dim3 grid, block;
  unsigned shared_bytes;
  uint32_t arg_begin, num_args;
};

// An instantiated chain of one length: the graph it came from (whose nodes name the executable
// graph's nodes) and two executable graphs, launched in turn so that the one whose parameters are
// set is never the one launched last.
struct Chain {
  cudaGraph_t graph = nullptr;
  std::vector<cudaGraphNode_t> nodes;
  cudaGraphExec_t exec[2] = {nullptr, nullptr};
  int next = 0;
};

// One stream's pending kernels, and its chains by length.
struct Batch {
  std::mutex mu;  // guards everything below
  std::vector<PendingKernel> pending;
  std::vector<size_t> arg_offsets;       // per argument, into arg_bytes
  std::vector<unsigned char> arg_bytes;  // the pending kernels' arguments
  std::map<int, Chain> chains;
};

constexpr size_t kArgAlign = 16;

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

std::atomic<uint64_t> kernel_generation{0};  // bumped by ForgetKernels: cached parameter sizes go stale

// The byte sizes of the first `count` parameters of `kernel` (cudaFuncGetParamInfo), cached per
// thread until kernels are unloaded (ForgetKernels): a new kernel may then have an old one's
// address. (CUDA has no parameter count to ask for; the caller's argument count is asked for.)
const std::vector<size_t>& ParamSizes(const void* kernel, size_t count) {
  thread_local std::unordered_map<const void*, std::vector<size_t>> cache;
  thread_local uint64_t cache_generation = 0;
  const uint64_t generation = kernel_generation.load(std::memory_order_acquire);
  if (generation != cache_generation) cache.clear(), cache_generation = generation;
  std::vector<size_t>& sizes = cache[kernel];
  if (sizes.size() == count) return sizes;
  sizes.clear();
  for (size_t i = 0, offset = 0, size = 0; i < count; ++i) {
    const cudaError_t error = cudaFuncGetParamInfo(kernel, i, &offset, &size);
    if (error != cudaSuccess) {
      cudaGetLastError();
      cache.erase(kernel);
      WEFT_THROW("launching a kernel: " << count << " arguments given, but the kernel has no parameter " << i
                                        << " (cudaFuncGetParamInfo: " << cudaGetErrorString(error) << ")");
    }
    sizes.push_back(size);
  }
  return sizes;
}

void Append(Batch& b, const void* kernel, dim3 grid, dim3 block, std::span<void* const> args, size_t shared_bytes) {
  const std::vector<size_t>& sizes = ParamSizes(kernel, args.size());
  if (b.pending.empty()) b.arg_bytes.clear();
  b.pending.push_back({kernel, grid, block, static_cast<unsigned>(shared_bytes), static_cast<uint32_t>(b.arg_offsets.size()),
                       static_cast<uint32_t>(sizes.size())});
  for (size_t i = 0; i < sizes.size(); ++i) {
    const size_t offset = b.arg_bytes.size();
    b.arg_bytes.resize(offset + (sizes[i] + kArgAlign - 1) / kArgAlign * kArgAlign);
    std::memcpy(b.arg_bytes.data() + offset, args[i], sizes[i]);
    b.arg_offsets.push_back(offset);
  }
}

// Node parameters of pending kernel `k`; `pointers` receives its argument pointers.
cudaKernelNodeParams NodeParams(Batch& b, const PendingKernel& k, std::vector<void*>& pointers) {
  for (uint32_t i = 0; i < k.num_args; ++i) pointers.push_back(b.arg_bytes.data() + b.arg_offsets[k.arg_begin + i]);
  cudaKernelNodeParams p{};
  p.func = const_cast<void*>(k.kernel);
  p.gridDim = k.grid, p.blockDim = k.block, p.sharedMemBytes = k.shared_bytes;
  p.kernelParams = k.num_args > 0 ? pointers.data() + pointers.size() - k.num_args : nullptr;
  return p;
}

// A chain of kernel nodes with `params`, instantiated twice.
Chain BuildChain(const std::vector<cudaKernelNodeParams>& params) {
  Chain c;
  WEFT_CUDA_CHECK(cudaGraphCreate(&c.graph, 0));
  for (const cudaKernelNodeParams& p : params) {
    cudaGraphNode_t node = nullptr;
    cudaGraphNode_t* last = c.nodes.empty() ? nullptr : &c.nodes.back();
    WEFT_CUDA_CHECK(cudaGraphAddKernelNode(&node, c.graph, last, last ? 1 : 0, &p));
    c.nodes.push_back(node);
  }
  for (cudaGraphExec_t& exec : c.exec) WEFT_CUDA_CHECK(cudaGraphInstantiate(&exec, c.graph, 0));
  return c;
}

void FlushLocked(Batch& b, cudaStream_t stream) {
  if (b.pending.empty()) return;
  thread_local std::vector<void*> pointers;
  thread_local std::vector<cudaKernelNodeParams> params;
  pointers.clear(), params.clear();
  pointers.reserve(b.arg_offsets.size());  // no reallocation: params point into it
  for (const PendingKernel& k : b.pending) params.push_back(NodeParams(b, k, pointers));
  const int count = static_cast<int>(b.pending.size());
  b.pending.clear(), b.arg_offsets.clear();
  auto it = b.chains.find(count);
  if (it == b.chains.end()) it = b.chains.emplace(count, BuildChain(params)).first;
  Chain& c = it->second;
  cudaGraphExec_t exec = c.exec[c.next];
  c.next ^= 1;
  cudaError_t error = cudaSuccess;
  for (int i = 0; i < count && error == cudaSuccess; ++i) error = cudaGraphExecKernelNodeSetParams(exec, c.nodes[i], &params[i]);
  if (error == cudaSuccess) error = cudaGraphLaunch(exec, stream);
  if (error != cudaSuccess) ThrowCudaError(error, "launching a batch of kernels (cudaGraphLaunch)", __FILE__, __LINE__);
}

}  // namespace

void LaunchKernel(const void* kernel, dim3 grid, dim3 block, std::span<void* const> args, size_t shared_bytes,
                  cudaStream_t stream) {
  void** const arg_pointers = const_cast<void**>(args.data());
  if (!Enabled() || stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    WEFT_CUDA_CHECK(cudaLaunchKernel(kernel, grid, block, arg_pointers, shared_bytes, stream));
    return;
  }
  Batch& b = *BatchOf(stream, /*create=*/true);
  std::lock_guard<std::mutex> lock(b.mu);
  if (static_cast<uint64_t>(grid.x) * grid.y * grid.z * block.x * block.y * block.z >= kDirectLaunchThreads) {
    FlushLocked(b, stream);  // after the kernels before it
    WEFT_CUDA_CHECK(cudaLaunchKernel(kernel, grid, block, arg_pointers, shared_bytes, stream));
    return;
  }
  Append(b, kernel, grid, block, args, shared_bytes);
  if (static_cast<int>(b.pending.size()) == kMaxBatch) FlushLocked(b, stream);
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

namespace {

void DestroyChains(Batch& b) {
  for (auto& [count, chain] : b.chains) {
    for (cudaGraphExec_t exec : chain.exec) cudaGraphExecDestroy(exec);  // a running one is freed when done
    cudaGraphDestroy(chain.graph);
  }
  b.chains.clear();
}

}  // namespace

void ForgetStream(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = Registry().find(stream);
  if (it == Registry().end()) return;
  DestroyChains(*it->second);
  Registry().erase(it);
  registry_generation.fetch_add(1, std::memory_order_acq_rel);
}

void ForgetKernels() {
  std::lock_guard<std::mutex> lock(registry_mu);
  for (auto& [stream, b] : Registry()) {
    std::lock_guard<std::mutex> batch_lock(b->mu);
    try {
      FlushLocked(*b, stream);
    } catch (const Error&) {
      // The stream's next synchronization reports it.
    }
    DestroyChains(*b);
  }
  kernel_generation.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace weft::gpu
