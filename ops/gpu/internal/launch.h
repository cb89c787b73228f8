// What every GPU operator of ops/gpu shares: naming the kernel instance for the call's dtype
// (with a clear error for a dtype the op does not support), output requests as kernels see
// them, the pack width, the grid, and the launch itself on the op's stream. Never synchronizes.
//
//   const std::string t = KernelType("relu", kFloatTypes, in, out);          // "float", ...
//   const int v = PackWidth(out[0].dtype(), {in[0].raw(), out[0].raw()});
//   Launch(ctx, "unary.cuh", Instance("weft::UnaryForward", {"weft::Relu", t, std::to_string(v)}),
//          Packs(n, v), in[0].raw(), out[0].raw(), n, 0.0, 0.0, ReqCode(req[0]));
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "core/dtype.h"
#include "core/tensor_view.h"
#include "ops/gpu/kernels/params.cuh"
#include "ops/op.h"

namespace weft::gpu {

// Dtypes of the elementwise ops (arithmetic in float for bfloat16 and float16), and of ops
// computed in the array's own type.
inline constexpr DType kElementwiseTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16,
                                              DType::kFloat16};
inline constexpr DType kFloatTypes[] = {DType::kFloat32, DType::kFloat64};
inline constexpr DType kFillTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16,
                                       DType::kFloat16, DType::kInt32,   DType::kInt64,
                                       DType::kUInt8};

// The kernels' name for the dtype shared by every tensor of `inputs` and `outputs` ("float",
// "double", "weft::bf16", "weft::f16", "int", ...). Throws weft::Error "<op> on GPU: expected ...,
// found ..." when they differ or the dtype is not in `allowed`. The kernels' name for `dtype`
// ("float", "double", "weft::bf16", "int", ...); empty for a dtype the kernels have no type for.
std::string TypeName(DType dtype);

std::string KernelType(const std::string& op, std::span<const DType> allowed,
                       std::span<const TensorView> inputs, std::span<const TensorView> outputs);

// "tmpl<arg0, arg1, ...>": a template kernel's name expression.
std::string Instance(const std::string& tmpl, std::initializer_list<std::string> args);

int ReqCode(OpReq req);  // kReqNull, kReqWrite (kWrite and kWriteInplace) or kReqAdd

// Elements per 16-byte pack when every pointer is 16-byte aligned, else 1.
int PackWidth(DType dtype, std::initializer_list<const void*> pointers);
// Work items of a ForEachPack loop over n elements in packs of `width`.
inline int64_t Packs(int64_t n, int width) { return (n + width - 1) / width; }

// The device's streaming multiprocessors (read once per thread and device).
int SmCount(int device);
// Blocks of kGpuBlock threads of kernel `name` of ops/gpu/kernels/`file` that one SM of the op's
// device holds at once, as its registers and shared memory allow (once per kernel, device and
// thread): a grid of this many blocks an SM is one wave.
int ResidentBlocksPerSm(const OpContext& ctx, const char* file, const std::string& name);

// Blocks of kGpuBlock threads for `items` grid-stride items on `device`: one item a thread, up to
// a cap of resident waves (what LaunchArgs launches).
unsigned GridBlocks(int device, int64_t items);

// Launches kernel `name` of ops/gpu/kernels/`file` on the op's stream, kGpuBlock threads per
// block, enough blocks for `items` grid-stride items (a block per item when `block_per_item`),
// with `shared_bytes` of dynamic shared memory a block (the kernel's WEFT_DYNAMIC_SHARED array;
// past 48 KB too: the kernel's limit is raised on its first such launch on a device). Each
// argument is passed by value and must have the kernel parameter's exact layout.
void LaunchArgs(const OpContext& ctx, const char* file, const std::string& name, int64_t items,
                bool block_per_item, std::span<void* const> args, size_t shared_bytes = 0);

template <typename... Args>
void Launch(const OpContext& ctx, const char* file, const std::string& name, int64_t items,
            Args... args) {
  void* pointers[] = {static_cast<void*>(&args)...};
  LaunchArgs(ctx, file, name, items, /*block_per_item=*/false, pointers);
}

// Building blocks of several ops: y = value, and y = x, as `req` says, on any dtype of
// kFillTypes (a copy that adds: kElementwiseTypes).
void FillGpu(const OpContext& ctx, double value, OpReq req, const TensorView& y);
void CopyGpu(const OpContext& ctx, const TensorView& x, OpReq req, const TensorView& y);

}  // namespace weft::gpu
