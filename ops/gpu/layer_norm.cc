// LayerNorm and _backward_LayerNorm on the GPU (ops/nn/layer_norm.cc says what they compute), on
// weft's kernels (kernels/layer_norm.cuh): float32, bfloat16 and float16 data, float32 statistics,
// scale and shift; out_dtype's 16-bit output (and out_grad) of float32 data is the kernels' U.
// float64 is the CPU's (its loops exist for finite differences).
//
// Rows along the last axis of whole 16-byte packs, at most kGpuLnWarpMaxC (1024) values long, as a
// transformer's are, run the warp kernels: a warp a row, held in registers (one read of the data).
// Other rows run the block kernels: a block a row, the forward's mean and variance in two passes
// over the row (the second reads it from cache), then y.
// The backward's blocks keep partial sums of the parameter gradients (two floats per value of C
// for each of at most kMaxPartialBlocks blocks, in the workspace); then LnParamGradSum adds the
// blocks' sums in a fixed order (deterministic: no atomics) into d_gamma and d_beta as requested,
// one launch for both. The warp backward's grid is one wave of the blocks its registers let an
// SM hold, each warp loading its next row while it computes one. Before (a wave of 4 rows a warp,
// a row's loads, then its sums; the parameter sums in four launches) an H100 took 28.4 us for the
// (8192, 768) bfloat16 backward and 7.2 us for the sums (bench/README.md, WEFT_PROFILE).
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// Blocks of the block backward (each keeps 2 * C partial sums): enough to fill an H200 (132 SMs)
// and at most 2^24 partial sums of each parameter.
constexpr int64_t kMaxPartialBlocks = 1024;
constexpr int64_t kMaxPartials = int64_t{1} << 24;
// The warp kernels' warps a block.
constexpr int64_t kWarpsPerBlock = kGpuBlock / 32;
// LnParamGradSum's columns a block (kLnSumColumns of layer_norm.cuh).
constexpr int64_t kSumColumns = 32;

struct LnGpuCall {
  LayerNormParam p;
  LnDims d;
  DType dtype;  // the data's
  DType out;    // the output's and out_grad's: dtype, or a 16-bit type for float32 data
};

// `out`: the output (forward) or out_grad (backward).
LnGpuCall CallOf(const char* op, const Attrs& a, const TensorView& data, const TensorView& out) {
  const LayerNormParam& p = a.Get<LayerNormParam>();
  CheckDType(op, data.dtype(), {DType::kFloat32, DType::kBFloat16, DType::kFloat16});
  return {p, LnDimsOf(op, p, data.shape()), data.dtype(), out.dtype()};
}

// Packs a lane of the warp kernels holds for these rows, or 0 where they do not take them (rows not
// along the last axis, not whole 16-byte packs or longer than kGpuLnWarpMaxC, an array off 16
// bytes).
int WarpPacks(const LnGpuCall& c, std::initializer_list<const void*> arrays) {
  const int64_t v = 16 / static_cast<int64_t>(DTypeSize(c.dtype));
  if (c.d.inner != 1 || c.d.c % v != 0 || c.d.c > kGpuLnWarpMaxC) return 0;
  for (const void* p : arrays) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return 0;
  }
  return static_cast<int>((c.d.c + 32 * v - 1) / (32 * v));
}

// `kernel` of layer_norm.cuh for T = the data's type, U = the output's (and `packs`, for a warp
// kernel).
std::string LnKernel(const LnGpuCall& c, const char* kernel, int packs) {
  const std::string t = TypeName(c.dtype), u = TypeName(c.out);
  return packs > 0 ? Instance(kernel, {t, u, std::to_string(packs)}) : Instance(kernel, {t, u});
}

// Launches LnKernel(c, kernel, packs) with `blocks` blocks.
template <typename... Args>
void LaunchLn(const OpContext& ctx, const LnGpuCall& c, const char* kernel, int packs,
              int64_t blocks, Args... args) {
  void* pointers[] = {static_cast<void*>(&args)...};
  LaunchArgs(ctx, "layer_norm.cuh", LnKernel(c, kernel, packs), blocks, /*block_per_item=*/true,
             pointers);
}

// in: (data, gamma, beta); out: (output, mean, rstd).
void LnForwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  const LnGpuCall c = CallOf("LayerNorm", a, in[0], out[0]);
  if (req[0] == OpReq::kNull && req[1] == OpReq::kNull && req[2] == OpReq::kNull) return;
  const GpuCall call(ctx);
  const int64_t rows = c.d.Rows();
  const int packs = WarpPacks(c, {in[0].raw(), in[1].raw(), in[2].raw(), out[0].raw()});
  const int64_t blocks = packs > 0 ? (rows + kWarpsPerBlock - 1) / kWarpsPerBlock : rows;
  if (packs > 0) {
    LaunchLn(ctx, c, "weft::LnForwardWarp", packs, blocks, in[0].raw(), in[1].raw(), in[2].raw(),
             out[0].raw(), out[1].raw(), out[2].raw(), rows, c.d.c, static_cast<float>(c.p.eps),
             ReqCode(req[0]), ReqCode(req[1]), ReqCode(req[2]));
  } else {
    LaunchLn(ctx, c, "weft::LnForward", 0, blocks, in[0].raw(), in[1].raw(), in[2].raw(),
             out[0].raw(), out[1].raw(), out[2].raw(), rows, c.d.c, c.d.inner,
             static_cast<float>(c.p.eps), ReqCode(req[0]), ReqCode(req[1]), ReqCode(req[2]));
  }
}

// The backward's blocks: for the warp kernel (`packs` > 0) one wave of resident blocks (a warp a
// row up to that), each warp then taking every W-th row of the W warps, its next row's loads in
// flight while it computes one; for the block kernel one a row, up to the caps.
int64_t BackwardBlocks(const OpContext& ctx, const LnGpuCall& c, int packs) {
  if (packs == 0)
    return std::max<int64_t>(1, std::min({c.d.Rows(), kMaxPartialBlocks, kMaxPartials / c.d.c}));
  const int64_t wave =
      int64_t{SmCount(ctx.run.device.id)} *
      ResidentBlocksPerSm(ctx, "layer_norm.cuh", LnKernel(c, "weft::LnBackwardWarp", packs));
  return std::max<int64_t>(1, std::min((c.d.Rows() + kWarpsPerBlock - 1) / kWarpsPerBlock, wave));
}

// in: as LnBackwardInput places them; out: (d_data, d_gamma, d_beta).
void LnBackwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                   std::span<const OpReq> req, std::span<const TensorView> out) {
  const LnGpuCall c = CallOf("_backward_LayerNorm", a, in[kLnData], in[kLnOutGrad]);
  const bool params = req[1] != OpReq::kNull || req[2] != OpReq::kNull;
  if (req[0] == OpReq::kNull && !params) return;
  const GpuCall call(ctx);
  const int packs =
      WarpPacks(c, {in[kLnOutGrad].raw(), in[kLnData].raw(), in[kLnGamma].raw(), out[0].raw()});
  const int64_t blocks = BackwardBlocks(ctx, c, packs);
  void* partial = params ? call.Workspace({blocks * 2 * c.d.c * sizeof(float)})[0] : nullptr;
  const void *dy = in[kLnOutGrad].raw(), *x = in[kLnData].raw(), *gamma = in[kLnGamma].raw(),
             *mean = in[kLnMean].raw(), *rstd = in[kLnRstd].raw();
  if (packs > 0) {
    LaunchLn(ctx, c, "weft::LnBackwardWarp", packs, blocks, dy, x, gamma, mean, rstd, out[0].raw(),
             partial, c.d.Rows(), c.d.c, ReqCode(req[0]));
  } else {
    LaunchLn(ctx, c, "weft::LnBackward", 0, blocks, dy, x, gamma, mean, rstd, out[0].raw(), partial,
             c.d.Rows(), c.d.c, c.d.inner, ReqCode(req[0]));
  }
  if (!params) return;
  // d_gamma, d_beta: the partial rows' column sums, in block order
  void *d_gamma = out[1].raw(), *d_beta = out[2].raw();
  int64_t partial_rows = blocks, c_values = c.d.c;
  int req_gamma = ReqCode(req[1]), req_beta = ReqCode(req[2]);
  void* args[] = {&partial, &partial_rows, &c_values, &d_gamma, &d_beta, &req_gamma, &req_beta};
  LaunchArgs(ctx, "layer_norm.cuh", "weft::LnParamGradSum",
             (2 * c.d.c + kSumColumns - 1) / kSumColumns, /*block_per_item=*/true, args);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {
                               {"LayerNorm", {.compute = LnForwardGpu}},
                               {"_backward_LayerNorm", {.compute = LnBackwardGpu}},
                           });

}  // namespace
}  // namespace weft::gpu
