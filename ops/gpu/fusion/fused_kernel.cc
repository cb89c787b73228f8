#include "ops/gpu/fusion/fused_kernel.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/gpu/cuda_check.h"
#include "core/mutex.h"
#include "core/no_destructor.h"
#include "ops/gpu/fusion/codegen.h"
#include "ops/gpu/fusion/device_memory.h"
#include "ops/gpu/fusion/device_param_budget.h"
#include "ops/gpu/fusion/fallback.h"
#include "ops/gpu/fusion/kernel_plan.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"
#include "storage/storage.h"

namespace weft::gpu {
namespace {

// Graph kernel nodes are kept to parameters of at most this many bytes (fused_kernel.h says why).
constexpr size_t kGraphParamBytes = 4096;
// Past this many live steps a kernel works one element at a time (fused_kernel.h says why).
constexpr size_t kMaxPackedSteps = 1024;

struct Counters {
  std::atomic<int64_t> kernels{0}, vectorized{0}, tables{0}, index64{0}, direct{0}, fallbacks{0};
};
Counters& Stats() {
  static NoDestructor<Counters> counters;  // ops may run during exit
  return *counters;
}

// Prints "weft: warning: <group> on gpu:N runs unfused: <reason>" once per (group, reason).
void WarnOnce(const FusedGroup& group, Device device, const std::string& reason) {
  static Mutex mu;
  static NoDestructor<std::set<std::string>> warned;  // guarded by mu
  constexpr size_t kMaxReason = 4000;                 // NVRTC logs can be long
  MutexLock lock(&mu);
  if (!warned->insert(group.label + '\0' + reason).second) return;
  std::cerr << "weft: warning: " << group.label << " on " << device << " runs unfused: "
            << (reason.size() > kMaxReason ? reason.substr(0, kMaxReason) + " ..." : reason)
            << std::endl;
}

// Bytes per pack of the widest full-size tensor. 32, not 16: each thread then has two 16-byte
// loads in flight per input (sm_90 splits a pack into 16-byte accesses), which brings the 8-op
// chain closer to a copy's bandwidth (`gpu_bundle/bin/gpu_bench --fusion=1`, 16 against 32 in one
// session; bench/README.md has the figures).
constexpr size_t kPackBytes = 32;

// Elements per pack: kPackBytes of the widest full-size tensor the kernel loads or stores, when
// every such pointer is aligned to its pack; else 1. (Broadcast inputs are read per element.)
int PackWidthOf(const FusedGroup& g, const KernelPlan& plan, std::span<const TensorView> inputs,
                std::span<const TensorView> outputs) {
  if (static_cast<size_t>(std::count(plan.live.begin(), plan.live.end(), true)) > kMaxPackedSteps)
    return 1;
  std::vector<const TensorView*> full;
  for (uint32_t i = 0; i < g.num_inputs; ++i) {
    if (plan.loaded[i] && plan.input_kinds[i] == FusedGroup::InputKind::kFull)
      full.push_back(&inputs[i]);
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (plan.out_req[k] != OpReq::kNull) full.push_back(&outputs[k]);
  }
  size_t widest = 1;
  for (const TensorView* t : full) widest = std::max(widest, DTypeSize(t->dtype()));
  const int width = static_cast<int>(kPackBytes / widest);
  for (const TensorView* t : full) {
    if (reinterpret_cast<uintptr_t>(t->raw()) % (width * DTypeSize(t->dtype())) != 0) return 1;
  }
  return width;
}

// Why `kernel` cannot be launched as the host will launch it (kGpuBlock threads, one parameter of
// `param_bytes`), or "" when it can.
std::string LaunchProblem(const rtc::Kernel& kernel, int device, size_t param_bytes) {
  DeviceGuard guard(device);
  const void* func = reinterpret_cast<const void*>(kernel.handle());
  cudaFuncAttributes attrs{};
  WEFT_CUDA_CHECK(cudaFuncGetAttributes(&attrs, func));
  if (attrs.maxThreadsPerBlock < kGpuBlock) {
    return "the kernel runs at most " + std::to_string(attrs.maxThreadsPerBlock) +
           " threads a block (" + std::to_string(attrs.numRegs) + " registers a thread), not " +
           std::to_string(kGpuBlock);
  }
  size_t offset = 0, size = 0;
  WEFT_CUDA_CHECK(cudaFuncGetParamInfo(func, 0, &offset, &size));
  if (size != param_bytes) {
    return "the kernel's parameter has " + std::to_string(size) + " bytes, the host's " +
           std::to_string(param_bytes);
  }
  return "";
}

// One prepared kernel and its arguments.
class FusedKernel {
 public:
  struct Config {
    rtc::Kernel kernel;
    unsigned blocks;
    int width;
    bool index64;
    bool table;
    std::vector<uint64_t> args;  // the argument struct
  };
  FusedKernel(std::shared_ptr<const FusedGroup> group, Device device, std::span<const OpReq> req,
              Config config, bool at_bind);
  void Run(const OpContext& ctx, std::span<const TensorView> in,
           std::span<const TensorView> out) const;

 private:
  size_t bytes() const { return config_.args.size() * sizeof(uint64_t); }
  void* TableForCall(const OpContext& ctx, engine::GpuStream& stream) const;
  cudaError_t LaunchDirect(engine::GpuStream& stream) const;
  void RunUnfused(const OpContext& ctx, std::span<const TensorView> in,
                  std::span<const TensorView> out, cudaError_t error) const;

  std::shared_ptr<const FusedGroup> group_;
  Device device_;
  std::vector<OpReq> req_;
  Config config_;
  bool direct_;
  DeviceMemory table_;  // the arguments in device memory, when uploaded at bind time
  // After a failed direct launch: the unfused steps, made once (under fallback_once_), used from
  // then on.
  mutable std::once_flag fallback_once_;
  mutable std::unique_ptr<FusedFallback> fallback_;
  mutable std::atomic<bool> failed_{false};  // release/acquire: publishes fallback_
};

FusedKernel::FusedKernel(std::shared_ptr<const FusedGroup> group, Device device,
                         std::span<const OpReq> req, Config config, bool at_bind)
    : group_(std::move(group)),
      device_(device),
      req_(req.begin(), req.end()),
      config_(std::move(config)) {
  direct_ = !config_.table && bytes() > kGraphParamBytes;
  if (!config_.table || !at_bind) return;
  table_ = DeviceMemory(device_, bytes());
  UploadNow(table_, config_.args.data(), bytes());
}

void FusedKernel::Run(const OpContext& ctx, std::span<const TensorView> in,
                      std::span<const TensorView> out) const {
  if (failed_.load(std::memory_order_acquire)) return fallback_->Run(ctx, in, out);
  engine::GpuStream& stream = StreamOf(ctx);
  const dim3 grid(config_.blocks), block(kGpuBlock);
  if (config_.table) {
    void* table = table_.data() != nullptr ? table_.data() : TableForCall(ctx, stream);
    void* args[] = {&table};
    return config_.kernel.Launch(grid, block, args, stream);
  }
  if (!direct_) {
    void* args[] = {const_cast<uint64_t*>(config_.args.data())};
    return config_.kernel.Launch(grid, block, args, stream);
  }
  const cudaError_t error = LaunchDirect(stream);
  if (error != cudaSuccess) RunUnfused(ctx, in, out, error);
}

// The arguments copied into the call's workspace, stream-ordered before the kernel.
void* FusedKernel::TableForCall(const OpContext& ctx, engine::GpuStream& stream) const {
  void* table = ctx.Workspace(bytes());
  Storage::Get(device_)->Copy(table, config_.args.data(), bytes(), &stream);
  return table;
}

cudaError_t FusedKernel::LaunchDirect(engine::GpuStream& stream) const {
  void* args[] = {const_cast<uint64_t*>(config_.args.data())};
  const void* func = reinterpret_cast<const void*>(config_.kernel.handle());
  return stream.Library([&](cudaStream_t s) {
    return cudaLaunchKernel(func, dim3(config_.blocks), dim3(kGpuBlock), args, 0, s);
  });
}

// A launch that failed (a configuration the device refused: the error is not sticky) is this
// kernel's for good: warn, and run the steps unfused from now on.
void FusedKernel::RunUnfused(const OpContext& ctx, std::span<const TensorView> in,
                             std::span<const TensorView> out, cudaError_t error) const {
  cudaGetLastError();  // clears it
  std::call_once(fallback_once_, [&] {
    WarnOnce(*group_, device_,
             std::string("its kernel did not launch: ") + cudaGetErrorString(error));
    fallback_ = std::make_unique<FusedFallback>(group_, device_, req_);
    ++Stats().fallbacks;
    failed_.store(true, std::memory_order_release);
  });
  fallback_->Run(ctx, in, out);
}

// The kernel for these tensors, compiled and checked, with its arguments; nullopt with the reason
// when it cannot be used.
std::optional<FusedKernel::Config> Compile(const FusedGroup& g, Device device,
                                           std::span<const OpReq> req,
                                           std::span<const TensorView> in,
                                           std::span<const TensorView> out,
                                           rtc::KernelLibrary& library, std::string* reason) {
  try {
    KernelPlan plan = PlanKernel(g, req, /*index64=*/false);
    const int width = PackWidthOf(g, plan, in, out);
    const unsigned blocks = GridBlocks(device.id, Packs(g.size, width));
    const bool index64 = GetEnvBool("WEFT_FUSION_TEST_INDEX64", false) ||
                         g.size + int64_t{blocks} * kGpuBlock > INT32_MAX;
    if (index64) plan = PlanKernel(g, req, /*index64=*/true);
    const ParamPlacement params = PlaceParams(plan.bytes, KernelParamBudget(device.id));
    const bool table = params.table;
    const CodegenOptions options{width, table, ComputeCapability(device.id),
                                 GetEnvBool("WEFT_FUSION_TEST_BAD_CODE", false)};
    const std::optional<std::string> source = GenerateFusedSource(g, plan, options, reason);
    if (!source) return std::nullopt;
    const std::optional<rtc::Kernel> kernel =
        library.TryGet({"fused", *source, kFusedKernelName, {}}, device.id, reason);
    if (!kernel) return std::nullopt;
    *reason = LaunchProblem(*kernel, device.id, params.param_bytes);
    if (!reason->empty()) return std::nullopt;
    return FusedKernel::Config{*kernel, blocks, width, index64, table, FillArgs(plan, g, in, out)};
  } catch (const Error& e) {  // a group the plan cannot walk, a CUDA error loading the kernel
    *reason = e.what();
    return std::nullopt;
  }
}

void Count(const FusedKernel::Config& c) {
  Counters& s = Stats();
  ++s.kernels;
  s.vectorized += c.width > 1;
  s.tables += c.table;
  s.index64 += c.index64;
  s.direct += !c.table && c.args.size() * sizeof(uint64_t) > kGraphParamBytes;
}

}  // namespace

ComputeFn PrepareFusedGpu(std::shared_ptr<const FusedGroup> group, Device device,
                          std::span<const TensorView> inputs, std::span<const OpReq> req,
                          std::span<const TensorView> outputs, rtc::KernelLibrary& library,
                          bool at_bind) {
  if (std::all_of(req.begin(), req.end(), [](OpReq r) { return r == OpReq::kNull; })) {
    return [](const OpContext&, const Attrs&, std::span<const TensorView>, std::span<const OpReq>,
              std::span<const TensorView>) {};
  }
  std::string reason;
  std::optional<FusedKernel::Config> config =
      Compile(*group, device, req, inputs, outputs, library, &reason);
  if (config) {
    Count(*config);
    auto kernel =
        std::make_shared<const FusedKernel>(group, device, req, std::move(*config), at_bind);
    return [kernel](const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                    std::span<const OpReq>,
                    std::span<const TensorView> out) { kernel->Run(ctx, in, out); };
  }
  WarnOnce(*group, device, reason);
  ++Stats().fallbacks;
  auto fallback = std::make_shared<const FusedFallback>(group, device, req);
  return [fallback](const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                    std::span<const OpReq>,
                    std::span<const TensorView> out) { fallback->Run(ctx, in, out); };
}

FusedGpuStats GetFusedGpuStats() {
  const Counters& c = Stats();
  return {c.kernels.load(), c.vectorized.load(), c.tables.load(),
          c.index64.load(), c.direct.load(),     c.fallbacks.load()};
}

}  // namespace weft::gpu
