#include "engine/gpu/launch_batch.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "core/gpu/cuda_check.h"
#include "core/mutex.h"
#include "core/no_destructor.h"
#include "engine/gpu/device_tracer.h"
#include "engine/profiler_hooks.h"

namespace weft::gpu {

namespace {

// A kernel waiting in a batch: its launch configuration, and its arguments copied into the
// batch's argument bytes [bytes_begin, bytes_end) (argument i's kArgAlign-aligned slot starts at
// arg_offsets[arg_begin + i]).
struct PendingKernel {
  const void* kernel;
  dim3 grid, block;
  unsigned shared_bytes;
  uint32_t arg_begin, num_args;
  size_t bytes_begin, bytes_end;
  uint64_t
      op;  // the profiled op that launched it (engine::CurrentProfiledOp), for the device tracer
};

// What a node of an executable chain was last set to: a node set again to the same kernel,
// configuration and argument bytes (a training loop's steady state) is left as it is.
struct NodeState {
  const void* kernel = nullptr;
  dim3 grid, block;
  unsigned shared_bytes = 0;
  std::vector<unsigned char> args;

  bool Same(const cudaKernelNodeParams& p, std::span<const unsigned char> arg_bytes) const {
    return kernel == p.func && grid.x == p.gridDim.x && grid.y == p.gridDim.y &&
           grid.z == p.gridDim.z && block.x == p.blockDim.x && block.y == p.blockDim.y &&
           block.z == p.blockDim.z && shared_bytes == p.sharedMemBytes &&
           args.size() == arg_bytes.size() &&
           std::memcmp(args.data(), arg_bytes.data(), args.size()) == 0;
  }
  void Assign(const cudaKernelNodeParams& p, std::span<const unsigned char> arg_bytes) {
    kernel = p.func, grid = p.gridDim, block = p.blockDim, shared_bytes = p.sharedMemBytes;
    args.assign(arg_bytes.begin(), arg_bytes.end());
  }
};

// An instantiated chain of one length: the graph it came from (whose nodes name the executable
// graph's nodes), the executable graph, and what each of its nodes holds.
struct Chain {
  cudaGraph_t graph = nullptr;
  std::vector<cudaGraphNode_t> nodes;
  cudaGraphExec_t exec = nullptr;
  std::vector<NodeState> state;
};

constexpr size_t kArgAlign = 16;

bool Enabled() {
  static const bool enabled = GetEnvBool("WEFT_GPU_LAUNCH_BATCH", true);
  return enabled;
}

}  // namespace

// One stream's pending kernels, and its chains by length.
struct LaunchBatch::State {
  State(cudaStream_t s, int d, bool batch) : stream(s), device(d), batching(batch && Enabled()) {}
  const cudaStream_t stream;
  const int device;     // the stream's GPU: current while a flush launches
  const bool batching;  // false: every kernel is launched at once
  Mutex mu;
  std::vector<PendingKernel> pending WEFT_GUARDED_BY(mu);
  std::vector<size_t> arg_offsets WEFT_GUARDED_BY(mu);       // per argument, into arg_bytes
  std::vector<unsigned char> arg_bytes WEFT_GUARDED_BY(mu);  // the pending kernels' arguments
  std::map<int, Chain> chains WEFT_GUARDED_BY(mu);
  std::string failure WEFT_GUARDED_BY(mu);  // a failed launch not yet raised by Flush
};

namespace {

using State = LaunchBatch::State;

// Every live batch, for FlushAll and ForgetKernels. A batch is added by its constructor and
// removed by its destructor, both under registry_mu; FlushAll and ForgetKernels hold registry_mu
// while they use the batches they found, so none is freed under them. Lock order: registry_mu,
// then a batch's mu.
Mutex registry_mu;
std::vector<State*>& Registry() WEFT_REQUIRES(registry_mu) {
  static NoDestructor<std::vector<State*>> batches;  // guarded by registry_mu
  return *batches;
}

std::atomic<uint64_t> kernel_generation{
    0};  // bumped by ForgetKernels: cached parameter sizes go stale

// The byte sizes of the first `count` parameters of `kernel`, as cudaFuncGetParamInfo reports
// them. (CUDA has no parameter count to ask for; the caller's argument count is asked for.)
std::vector<size_t> AskParamSizes(const void* kernel, size_t count) {
  std::vector<size_t> sizes;
  for (size_t i = 0, offset = 0, size = 0; i < count; ++i) {
    const cudaError_t error = cudaFuncGetParamInfo(kernel, i, &offset, &size);
    if (error != cudaSuccess) {
      cudaGetLastError();
      WEFT_THROW("launching a kernel: "
                 << count << " arguments given, but the kernel has no parameter " << i
                 << " (cudaFuncGetParamInfo: " << cudaGetErrorString(error) << ")");
    }
    sizes.push_back(size);
  }
  return sizes;
}

// AskParamSizes, cached per thread (no lock on the launch path) over a cache of the process (a
// kernel is asked for once, whichever worker launches it first: the driver's answer may wait for
// the device), both until kernels are unloaded (ForgetKernels): a new kernel may then have an old
// one's address.
const std::vector<size_t>& ParamSizes(const void* kernel, size_t count) {
  thread_local std::unordered_map<const void*, std::vector<size_t>> cache;
  thread_local uint64_t cache_generation = 0;
  const uint64_t generation = kernel_generation.load(std::memory_order_acquire);
  if (generation != cache_generation) cache.clear(), cache_generation = generation;
  std::vector<size_t>& sizes = cache[kernel];
  if (sizes.size() == count) return sizes;
  static Mutex shared_mu;
  // Guarded by shared_mu.
  static NoDestructor<std::unordered_map<const void*, std::vector<size_t>>> shared;
  static uint64_t shared_generation = 0;
  MutexLock lock(&shared_mu);
  if (generation != shared_generation) shared->clear(), shared_generation = generation;
  std::vector<size_t>& known = (*shared)[kernel];
  if (known.size() != count) {
    try {
      known = AskParamSizes(kernel, count);
    } catch (...) {
      shared->erase(kernel), cache.erase(kernel);
      throw;
    }
  }
  return sizes = known;
}

// With b.mu held, as the functions below that take a State.
void Append(State& b, const void* kernel, dim3 grid, dim3 block, std::span<void* const> args,
            size_t shared_bytes) WEFT_REQUIRES(b.mu) {
  const std::vector<size_t>& sizes = ParamSizes(kernel, args.size());
  if (b.pending.empty()) b.arg_bytes.clear();
  PendingKernel k{kernel,
                  grid,
                  block,
                  static_cast<unsigned>(shared_bytes),
                  static_cast<uint32_t>(b.arg_offsets.size()),
                  static_cast<uint32_t>(sizes.size()),
                  b.arg_bytes.size(),
                  0,
                  engine::CurrentProfiledOp()};
  for (size_t i = 0; i < sizes.size(); ++i) {
    const size_t offset = b.arg_bytes.size();
    b.arg_bytes.resize(offset +
                       (sizes[i] + kArgAlign - 1) / kArgAlign * kArgAlign);  // padding zeroed
    std::memcpy(b.arg_bytes.data() + offset, args[i], sizes[i]);
    b.arg_offsets.push_back(offset);
  }
  k.bytes_end = b.arg_bytes.size();
  b.pending.push_back(k);  // last: a throw above leaves the pending kernels as they were
}

// Node parameters of pending kernel `k`; `pointers` receives its argument pointers.
cudaKernelNodeParams NodeParams(State& b, const PendingKernel& k, std::vector<void*>& pointers)
    WEFT_REQUIRES(b.mu) {
  for (uint32_t i = 0; i < k.num_args; ++i)
    pointers.push_back(b.arg_bytes.data() + b.arg_offsets[k.arg_begin + i]);
  cudaKernelNodeParams p{};
  p.func = const_cast<void*>(k.kernel);
  p.gridDim = k.grid, p.blockDim = k.block, p.sharedMemBytes = k.shared_bytes;
  p.kernelParams = k.num_args > 0 ? pointers.data() + pointers.size() - k.num_args : nullptr;
  return p;
}

void DestroyChain(Chain& c) {
  if (c.exec != nullptr) cudaGraphExecDestroy(c.exec);  // a running one is freed when done
  if (c.graph != nullptr) cudaGraphDestroy(c.graph);
  c = Chain{};
}

// A chain of kernel nodes with `params`, instantiated; on failure, nothing (and the error).
cudaError_t BuildChain(const std::vector<cudaKernelNodeParams>& params, Chain& c) {
  cudaError_t error = cudaGraphCreate(&c.graph, 0);
  for (size_t i = 0; i < params.size() && error == cudaSuccess; ++i) {
    cudaGraphNode_t node = nullptr;
    cudaGraphNode_t* last = c.nodes.empty() ? nullptr : &c.nodes.back();
    error = cudaGraphAddKernelNode(&node, c.graph, last, last ? 1 : 0, &params[i]);
    c.nodes.push_back(node);
  }
  if (error == cudaSuccess) error = cudaGraphInstantiate(&c.exec, c.graph, 0);
  if (error != cudaSuccess) DestroyChain(c);
  return error;
}

// Launches `params` (kernel i's argument bytes: `args[i]`) on the stream as the cached chain of
// their length, setting in place the nodes that differ from what they hold.
cudaError_t LaunchChain(State& b, const std::vector<cudaKernelNodeParams>& params,
                        const std::vector<std::span<const unsigned char>>& args)
    WEFT_REQUIRES(b.mu) {
  const int count = static_cast<int>(params.size());
  Chain& c = b.chains[count];
  if (c.exec == nullptr) {
    const cudaError_t error = BuildChain(params, c);
    if (error != cudaSuccess) return error;
    c.state.assign(count, NodeState{});
    for (int i = 0; i < count; ++i) c.state[i].Assign(params[i], args[i]);
  }
  for (int i = 0; i < count; ++i) {
    if (c.state[i].Same(params[i], args[i])) continue;
    const cudaError_t error = cudaGraphExecKernelNodeSetParams(c.exec, c.nodes[i], &params[i]);
    if (error != cudaSuccess) {
      for (NodeState& s : c.state) s = NodeState{};  // unknown now: set every node next time
      return error;
    }
    c.state[i].Assign(params[i], args[i]);
  }
  return cudaGraphLaunch(c.exec, b.stream);
}

// Launches the pending kernels (with the stream's device current). On failure the kernels are
// launched one by one, so that the good ones still run, and the first error is kept in `failure`.
void FlushLocked(State& b) WEFT_REQUIRES(b.mu) {
  if (b.pending.empty()) return;
  DeviceGuard guard(b.device);  // a flush may come from a thread bound to another GPU
  thread_local std::vector<void*> pointers;
  thread_local std::vector<cudaKernelNodeParams> params;
  thread_local std::vector<std::span<const unsigned char>> args;
  thread_local std::vector<uint64_t> ops;  // each kernel's op, while the device tracer records
  pointers.clear(), params.clear(), args.clear(), ops.clear();
  pointers.reserve(b.arg_offsets.size());  // no reallocation: params point into it
  const bool traced = TracingDevice();
  for (const PendingKernel& k : b.pending) {
    params.push_back(NodeParams(b, k, pointers));
    args.emplace_back(b.arg_bytes.data() + k.bytes_begin, k.bytes_end - k.bytes_begin);
    if (traced) ops.push_back(k.op);
  }
  b.pending.clear(), b.arg_offsets.clear();
  cudaError_t error = cudaSuccess;
  {
    LaunchAttribution attribution(ops, b.stream);
    error = LaunchChain(b, params, args);
  }
  if (error == cudaSuccess) return;
  cudaGetLastError();
  error = cudaSuccess;
  for (size_t i = 0; i < params.size(); ++i) {
    const cudaKernelNodeParams& p = params[i];
    LaunchAttribution attribution(
        traced ? std::span<const uint64_t>(&ops[i], 1) : std::span<const uint64_t>(), b.stream);
    const cudaError_t e =
        cudaLaunchKernel(p.func, p.gridDim, p.blockDim, p.kernelParams, p.sharedMemBytes, b.stream);
    if (e != cudaSuccess && error == cudaSuccess) error = e;
  }
  if (error == cudaSuccess) return;
  cudaGetLastError();
  if (b.failure.empty()) {
    b.failure = std::string("launching a batch of kernels: ") + cudaGetErrorName(error) + ": " +
                cudaGetErrorString(error);
  }
}

// FlushLocked, then raises a kept failure.
void FlushOrThrow(State& b) WEFT_REQUIRES(b.mu) {
  FlushLocked(b);
  if (!b.failure.empty()) throw Error(std::exchange(b.failure, std::string()));
}

}  // namespace

LaunchBatch::LaunchBatch(cudaStream_t stream, int device, bool batching)
    : state_(std::make_unique<State>(stream, device, batching)) {
  MutexLock lock(&registry_mu);
  Registry().push_back(state_.get());
}

LaunchBatch::~LaunchBatch() {
  MutexLock lock(&registry_mu);
  std::vector<State*>& all = Registry();
  all.erase(std::find(all.begin(), all.end(), state_.get()));
  MutexLock batch_lock(&state_->mu);
  for (auto& [count, chain] : state_->chains) DestroyChain(chain);
}

void LaunchBatch::Launch(const void* kernel, dim3 grid, dim3 block, std::span<void* const> args,
                         size_t shared_bytes) {
  State& b = *state_;
  void** const arg_pointers = const_cast<void**>(args.data());
  if (!b.batching) {
    WEFT_CUDA_CHECK(cudaLaunchKernel(kernel, grid, block, arg_pointers, shared_bytes, b.stream));
    return;
  }
  MutexLock lock(&b.mu);
  if (static_cast<uint64_t>(grid.x) * grid.y * grid.z * block.x * block.y * block.z >=
      kDirectLaunchThreads) {
    FlushOrThrow(b);  // after the kernels before it
    WEFT_CUDA_CHECK(cudaLaunchKernel(kernel, grid, block, arg_pointers, shared_bytes, b.stream));
    return;
  }
  Append(b, kernel, grid, block, args, shared_bytes);
  if (static_cast<int>(b.pending.size()) == kMaxBatch) FlushOrThrow(b);
}

void LaunchBatch::Flush() {
  if (!state_->batching) return;
  MutexLock lock(&state_->mu);
  FlushOrThrow(*state_);
}

void LaunchBatch::FlushWhenIdle() noexcept {
  if (!state_->batching) return;
  MutexLock lock(&state_->mu);
  try {
    FlushLocked(*state_);
  } catch (...) {  // the device guard failed: the kernels stay pending for the next flush
  }
}

// Every batch is flushed even when one raises; the first failure is raised after.
void LaunchBatch::FlushAll() {
  if (!Enabled()) return;
  std::exception_ptr first;
  MutexLock lock(&registry_mu);
  for (State* b : Registry()) {
    MutexLock batch_lock(&b->mu);
    try {
      FlushOrThrow(*b);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void LaunchBatch::ForgetKernels() noexcept {
  ForgetChains();
  kernel_generation.fetch_add(1, std::memory_order_acq_rel);
}

void LaunchBatch::ForgetChains() noexcept {
  MutexLock lock(&registry_mu);
  for (State* b : Registry()) {
    MutexLock batch_lock(&b->mu);
    try {
      FlushLocked(*b);  // a failed launch stays for the stream's next flush
    } catch (
        const Error&) {  // the device guard failed: the device is gone, and the kernels with it
      b->pending.clear(), b->arg_offsets.clear();
    }
    for (auto& [count, chain] : b->chains) DestroyChain(chain);
    b->chains.clear();
  }
}

}  // namespace weft::gpu
