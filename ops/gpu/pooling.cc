// Pooling and _backward_Pooling on the GPU (ops/nn/pooling.cc says what they compute), float32,
// float64 and bfloat16 (float arithmetic, one rounding per output), on NCHW or NHWC images
// (layout, ops/nn/window2d.h). Through cuDNN where it
// expresses the call: max pooling (padding never wins) and
// average pooling counting padding (CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING) or not
// (..._EXCLUDE_PADDING), with symmetric padding. A ceil-mode call whose last window reaches past
// the padding needs more padding after the input than before, which cuDNN cannot take, and an
// average that leaves out that extra padding: it runs weft's kernels (kernels/pooling.cuh), on
// the windows the CPU's loops use (ops/math/pool_window.h). bfloat16 always runs weft's kernels:
// the legacy pooling calls of cuDNN 9 are not documented for it.
//
// cudnnPoolingBackward reads the forward output, which _backward_Pooling does not get (its inputs
// are out_grad and data, as on the CPU): it recomputes the forward into the workspace first.
#include <limits>
#include <span>

#include "ops/gpu/internal/cudnn_desc.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"
#include "ops/nn/nn_params.h"
#include "ops/nn/window2d.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// ---- cuDNN ----

// The descriptors of one call: data x (N, C, H, W), output y (N, C, OH, OW) (as the layout lays
// them), the pooling.
struct PoolDescs {
  TensorDesc x, y;
  PoolingDesc pool;
};

PoolDescs DescsOf(const char* op, DType dtype, const PoolCall& call) {
  const Geometry2d& g = call.g;
  const bool last = call.win.channels_last;
  return {ImageDesc(op, dtype, Shape{g.n, g.c, g.h, g.w}, last),
          ImageDesc(op, dtype, Shape{g.n, g.c, g.oh, g.ow}, last),
          PoolingOf(call.win, call.type, call.count_include_pad)};
}

void RunPoolForward(const GpuCall& call, const PoolDescs& m, DType dtype, const void* x, OpReq req,
                    void* y) {
  WEFT_CUDNN_CHECK(call.Cudnn([&](cudnnHandle_t h) {
    return cudnnPoolingForward(h, m.pool.get(), One(dtype).get(), m.x.get(), x,
                               BetaFor(req, dtype).get(), m.y.get(), y);
  }));
}

// in: (out_grad, data); out: (d_data).
void CudnnPoolBackward(const OpContext& ctx, const PoolCall& pool, std::span<const TensorView> in,
                       OpReq req, const TensorView& dx) {
  const DType dtype = in[0].dtype();
  const PoolDescs m = DescsOf("_backward_Pooling", dtype, pool);
  const GpuCall call(ctx);
  void* y = call.Workspace({in[0].bytes()})[0];
  RunPoolForward(call, m, dtype, in[1].raw(), OpReq::kWrite, y);
  WEFT_CUDNN_CHECK(call.Cudnn([&](cudnnHandle_t h) {
    return cudnnPoolingBackward(h, m.pool.get(), One(dtype).get(), m.y.get(), y, m.y.get(),
                                in[0].raw(), m.x.get(), in[1].raw(), BetaFor(req, dtype).get(),
                                m.x.get(), dx.raw());
  }));
}

// ---- weft's kernels ----

GpuPool2d KernelArgsOf(const PoolCall& call) {
  const Window2d& win = call.win;
  const Geometry2d& g = call.g;
  return {g.n * g.c,
          g.h,
          g.w,
          g.oh,
          g.ow,
          g.DataStrides().step,  // C channels last, else 1
          {win.kernel[0], win.kernel[1]},
          {win.stride[0], win.stride[1]},
          {win.pad[0], win.pad[1]},
          call.type == PoolType::kMax ? 1 : 0,
          call.count_include_pad ? 1 : 0};
}

// ---- compute ----

// Whether weft's kernels run the call (else cuDNN).
bool OwnKernels(const PoolCall& pool, DType dtype) {
  return Is16BitFloat(dtype) || Overhangs(pool.win, pool.g);
}

// in: (data); out: (output).
void PoolForwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out) {
  const PoolCall pool = PoolCallOf(a, in[0].shape());
  CheckNotBlocked("Pooling", pool.win.blocked);
  if (req[0] == OpReq::kNull) return;
  const DType dtype = in[0].dtype();
  CheckDType("Pooling", dtype,
             {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16});
  if (OwnKernels(pool, dtype)) {
    Launch(ctx, "pooling.cuh", Instance("weft::PoolForward", {TypeName(dtype)}), out[0].size(),
           in[0].raw(), out[0].raw(), KernelArgsOf(pool), ReqCode(req[0]));
    return;
  }
  const PoolDescs m = DescsOf("Pooling", dtype, pool);
  const GpuCall call(ctx);
  RunPoolForward(call, m, dtype, in[0].raw(), req[0], out[0].raw());
}

// in: (out_grad, data); out: (d_data).
void PoolBackwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                     std::span<const OpReq> req, std::span<const TensorView> out) {
  const PoolCall pool = PoolCallOf(a, in[1].shape());
  CheckNotBlocked("_backward_Pooling", pool.win.blocked);
  if (req[0] == OpReq::kNull) return;
  const DType dtype = in[0].dtype();
  CheckDType("_backward_Pooling", dtype,
             {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16});
  if (!OwnKernels(pool, dtype)) return CudnnPoolBackward(ctx, pool, in, req[0], out[0]);
  const GpuPool2d args = KernelArgsOf(pool);
  // Max pooling: each window's largest input found once (PoolArgmax), where a plane's offsets fit
  // an int; the backward would otherwise scan every window covering each input (the pooling
  // backward took 6.9 of a 35 ms channels-last ResNet-50 step, bfloat16, b128, H100).
  int* best = nullptr;
  if (args.max && args.h * args.w <= std::numeric_limits<int>::max()) {
    best = static_cast<int*>(GpuCall(ctx).Workspace({in[0].size() * sizeof(int)})[0]);
    Launch(ctx, "pooling.cuh", Instance("weft::PoolArgmax", {TypeName(dtype)}), in[0].size(),
           in[1].raw(), best, args);
  }
  Launch(ctx, "pooling.cuh", Instance("weft::PoolBackward", {TypeName(dtype)}), out[0].size(),
         in[0].raw(), in[1].raw(), static_cast<const int*>(best), out[0].raw(), args,
         ReqCode(req[0]));
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {
                               {"Pooling", {.compute = PoolForwardGpu}},
                               {"_backward_Pooling", {.compute = PoolBackwardGpu}},
                           });

}  // namespace
}  // namespace weft::gpu
