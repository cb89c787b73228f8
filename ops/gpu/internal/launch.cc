#include "ops/gpu/internal/launch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "core/gpu/cuda_check.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/rtc/kernel_library.h"

namespace weft::gpu {
namespace {

// The most blocks a grid-stride kernel gets: 64 waves of resident blocks. Up to that a thread
// takes one item: relu on 64M floats runs at the copy's bandwidth with a pack per thread, and
// below it with 4 waves looping (the former cap): `gpu_bundle/bin/gpu_bench --floors_only=1`, the
// relu kernel alone against weft's copy (bench/README.md has the figures). Read once per thread
// and device (a launch should take no lock).
int64_t MaxBlocks(int device) {
  thread_local std::unordered_map<int, int64_t> cache;
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  int threads_per_sm = 0;
  WEFT_CUDA_CHECK(
      cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device));
  return cache.emplace(device, int64_t{SmCount(device)} * (threads_per_sm / kGpuBlock) * 64)
      .first->second;
}

}  // namespace

int SmCount(int device) {
  thread_local std::unordered_map<int, int> cache;
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  int sms = 0;
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return cache.emplace(device, sms).first->second;
}

std::string TypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float";
    case DType::kFloat64:
      return "double";
    case DType::kBFloat16:
      return "weft::bf16";
    case DType::kFloat16:
      return "weft::f16";
    case DType::kInt32:
      return "int";
    case DType::kInt64:
      return "long long";
    case DType::kUInt8:
      return "unsigned char";
    default:
      return "";
  }
}

std::string KernelType(const std::string& op, std::span<const DType> allowed,
                       std::span<const TensorView> inputs, std::span<const TensorView> outputs) {
  const DType dtype = outputs.empty() ? inputs[0].dtype() : outputs[0].dtype();
  for (std::span<const TensorView> group : {inputs, outputs}) {
    for (const TensorView& t : group) {
      if (t.dtype() != dtype) {
        WEFT_THROW(op << " on GPU: expected every array to be " << dtype << ", found "
                      << t.dtype());
      }
    }
  }
  if (std::find(allowed.begin(), allowed.end(), dtype) == allowed.end()) {
    std::ostringstream names;
    for (size_t i = 0; i < allowed.size(); ++i)
      names << (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") << allowed[i];
    WEFT_THROW(op << " on GPU: expected " << names.str() << ", found " << dtype);
  }
  return TypeName(dtype);
}

std::string Instance(const std::string& tmpl, std::initializer_list<std::string> args) {
  std::string name;
  name.reserve(96);  // one allocation: a name is built on every launch
  name += tmpl;
  name += '<';
  for (const std::string& a : args) {
    if (name.back() != '<') name += ", ";
    name += a;
  }
  name += '>';
  return name;
}

int ReqCode(OpReq req) {
  switch (req) {
    case OpReq::kNull:
      return kReqNull;
    case OpReq::kAddTo:
      return kReqAdd;
    default:
      return kReqWrite;
  }
}

int PackWidth(DType dtype, std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return 1;
  }
  return static_cast<int>(16 / DTypeSize(dtype));
}

// The kernel for (file, name, device): from a per-thread cache in front of the library (a launch
// is on every op's hot path; the library takes a lock and builds its key). Keyed by the name
// alone, per device, with the file checked: no key is built per launch.
rtc::Kernel CachedKernel(const char* file, const std::string& name, int device) {
  struct Cached {
    const char* file;
    cudaKernel_t kernel;
  };
  constexpr int kMaxDevices = 16;
  thread_local std::unordered_map<std::string, Cached> cache[kMaxDevices];
  if (device >= 0 && device < kMaxDevices) {
    auto it = cache[device].find(name);
    if (it != cache[device].end() && std::strcmp(it->second.file, file) == 0)
      return rtc::Kernel(it->second.kernel);
  }
  const rtc::Kernel kernel = rtc::KernelLibrary::Global().Get({file, "", name, {}}, device);
  if (device >= 0 && device < kMaxDevices) cache[device][name] = Cached{file, kernel.handle()};
  return kernel;
}

unsigned GridBlocks(int device, int64_t items) {
  return static_cast<unsigned>(std::min((items + kGpuBlock - 1) / kGpuBlock, MaxBlocks(device)));
}

// Lets `kernel` take `bytes` of dynamic shared memory on `device` when that passes the 48 KB every
// kernel may take: once per kernel, device and thread (a launch takes no lock).
void AllowSharedBytes(const rtc::Kernel& kernel, int device, size_t bytes) {
  constexpr size_t kDefaultLimit = 48 << 10;
  constexpr int kMaxDevices = 16;
  if (bytes <= kDefaultLimit) return;
  thread_local std::unordered_map<cudaKernel_t, size_t> allowed[kMaxDevices];
  size_t* limit = device >= 0 && device < kMaxDevices ? &allowed[device][kernel.handle()] : nullptr;
  if (limit != nullptr && *limit >= bytes) return;
  WEFT_CUDA_CHECK(cudaKernelSetAttributeForDevice(kernel.handle(),
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  static_cast<int>(bytes), device));
  if (limit != nullptr) *limit = bytes;
}

int ResidentBlocksPerSm(const OpContext& ctx, const char* file, const std::string& name) {
  constexpr int kMaxDevices = 16;
  const int device = ctx.run.device.id;
  const rtc::Kernel kernel = CachedKernel(file, name, device);
  thread_local std::unordered_map<cudaKernel_t, int> cache[kMaxDevices];
  int* cached = device >= 0 && device < kMaxDevices ? &cache[device][kernel.handle()] : nullptr;
  if (cached != nullptr && *cached > 0) return *cached;
  // The handle cast to a function pointer, as the runtime API takes a cudaKernel_t. Should that
  // fail, one block an SM (the error cleared: it is not sticky) still fills every SM once.
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &blocks, reinterpret_cast<const void*>(kernel.handle()), kGpuBlock, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    blocks = 1;
  }
  blocks = std::max(blocks, 1);
  if (cached != nullptr) *cached = blocks;
  return blocks;
}

void LaunchArgs(const OpContext& ctx, const char* file, const std::string& name, int64_t items,
                bool block_per_item, std::span<void* const> args, size_t shared_bytes) {
  if (items <= 0) return;
  const int device = ctx.run.device.id;
  const rtc::Kernel kernel = CachedKernel(file, name, device);
  AllowSharedBytes(kernel, device, shared_bytes);
  const unsigned blocks = block_per_item ? static_cast<unsigned>(std::min(items, MaxBlocks(device)))
                                         : GridBlocks(device, items);
  kernel.Launch(dim3(blocks), dim3(kGpuBlock), args, StreamOf(ctx), shared_bytes);
}

void FillGpu(const OpContext& ctx, double value, OpReq req, const TensorView& y) {
  if (req == OpReq::kNull || (req == OpReq::kAddTo && value == 0)) return;
  const std::string t = KernelType("fill", kFillTypes, {}, {&y, 1});
  const int64_t n = y.size();
  if (value == 0 && req != OpReq::kAddTo) {
    StreamOf(ctx).Memset(y.raw(), 0, y.bytes());
    return;
  }
  const int v = PackWidth(y.dtype(), {y.raw()});
  Launch(ctx, "fill.cuh", Instance("weft::Fill", {t, std::to_string(v)}), Packs(n, v), y.raw(), n,
         value, ReqCode(req));
}

void CopyGpu(const OpContext& ctx, const TensorView& x, OpReq req, const TensorView& y) {
  if (req == OpReq::kNull || (req != OpReq::kAddTo && x.raw() == y.raw())) return;
  if (req != OpReq::kAddTo) {
    WEFT_CHECK_EQ(x.bytes(), y.bytes()) << "copy on GPU: the arrays differ in size";
    StreamOf(ctx).Copy(y.raw(), x.raw(), y.bytes(), cudaMemcpyDeviceToDevice);
    return;
  }
  const std::string t = KernelType("copy (add to)", kElementwiseTypes, {&x, 1}, {&y, 1});
  const int64_t n = y.size();
  const int v = PackWidth(y.dtype(), {x.raw(), y.raw()});
  Launch(ctx, "unary.cuh",
         Instance("weft::UnaryForward", {"weft::fn::Identity", t, std::to_string(v)}), Packs(n, v),
         x.raw(), y.raw(), n, 0.0, 0.0, ReqCode(req));
}

}  // namespace weft::gpu
