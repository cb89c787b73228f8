// BatchNorm and _backward_BatchNorm on the GPU (ops/nn/batch_norm.cc says what they compute),
// through cuDNN's batch normalization (CUDNN_BATCHNORM_SPATIAL) on data seen as NCHW
// (outer, C, inner, 1), or NHWC for a channels-last image (DataDescOf). float32 and float64, and
// bfloat16 data with float32 statistics (cuDNN's pseudo-bfloat16 configuration, as for half).
// A channels-last image normalized with its batch's statistics runs cuDNN's persistent NHWC
// kernels instead (CUDNN_BATCHNORM_SPATIAL_PERSISTENT through the Ex calls, as PyTorch trains
// channels-last images): the spatial mode's kernels made a channels-last ResNet-50 step ten times
// slower than the NCHW one (502 against 55 ms, bfloat16, batch 128, H100).
//
// Forward: cudnnBatchNormalizationForwardTraining with batch statistics (it moves the running
// statistics with factor 1 - momentum and the unbiased variance, and saves the mean and invstd),
// else ForwardInference, with the saved statistics those of the moving ones (kernels/
// batch_norm.cuh). relu runs after, as the relu op's kernel (fn::Relu).
// Backward: out_grad masked by relu (relu's own gradient kernel, reading the output), then
// cudnnBatchNormalizationBackward with the saved statistics for d_gamma and d_beta and, with batch
// statistics, d_data; with constant statistics d_data = gamma * invstd * out_grad (a kernel).
// cuDNN's CUDNN_BATCHNORM_OPS_BN_ACTIVATION is left out: it wants NHWC half data and a reserve
// kept from forward to backward.
#include <span>
#include <string>
#include <vector>

#include "ops/gpu/internal/cudnn_desc.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

constexpr cudnnBatchNormMode_t kSpatial = CUDNN_BATCHNORM_SPATIAL;
constexpr cudnnBatchNormMode_t kPersistent = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
constexpr cudnnBatchNormOps_t kBnOnly = CUDNN_BATCHNORM_OPS_BN;

// One call: the attributes, the data's view and dtypes, whether it normalizes with the batch's
// statistics, and the descriptors of the data and of the statistics (and gamma, beta).
struct BnGpuCall {
  BatchNormParam p;
  BnDims d;
  DType dtype, stat;
  Device device;
  bool batch;
  bool channels_last;  // x is an NHWC image (DataDescOf)
  TensorDesc x, stats;

  bool relu() const { return p.act == BnAct::kRelu; }
  size_t StatBytes() const { return static_cast<size_t>(d.c) * DTypeSize(stat); }
  // C statistics at `at`.
  TensorView Stat(void* at) const { return TensorView(at, Shape{d.c}, stat, device); }
};

TensorDesc StatsDescOf(const TensorDesc& x) {
  TensorDesc stats;
  WEFT_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(stats.get(), x.get(), kSpatial));
  return stats;
}

// The data as cuDNN sees it: a channels-last image (4-D, the channels its last axis) as NHWC
// (N, C, H, W), for cuDNN's channels-last kernels, where the NCHW view (N * H * W, C, 1, 1) of the
// same bytes reduces every channel over a stride of C; anything else as NCHW (outer, C, inner, 1).
// float64 keeps the NCHW view.
bool IsChannelsLastImage(const TensorView& data, const BnDims& d) {
  return data.shape().ndim() == 4 && d.inner == 1 && data.dtype() != DType::kFloat64;
}

TensorDesc DataDescOf(const char* op, const TensorView& data, const BnDims& d) {
  const Shape& s = data.shape();
  if (IsChannelsLastImage(data, d))
    return ImageDesc(op, data.dtype(), Shape{s[0], s[3], s[1], s[2]}, /*channels_last=*/true);
  return ImageDesc(op, data.dtype(), Shape{d.outer, d.c, d.inner, 1});
}

BnGpuCall CallOf(const char* op, const Attrs& a, const TensorView& data, bool is_train) {
  const BatchNormParam& p = a.Get<BatchNormParam>();
  CheckDType(op, data.dtype(),
             {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16});
  const BnDims d = BnDimsOf(op, p, data.shape());
  CheckNotBlocked(op, p.blocked);
  const bool batch = is_train && !p.use_global_stats;
  if (batch) CheckBatchStatistics(op, d, data.shape());
  TensorDesc x = DataDescOf(op, data, d);
  TensorDesc stats = StatsDescOf(x);
  return {p,
          d,
          data.dtype(),
          BnStatType(data.dtype()),
          data.device(),
          batch,
          IsChannelsLastImage(data, d),
          std::move(x),
          std::move(stats)};
}

// gamma as cuDNN reads it: ones for fix_gamma, filled into `ones` (C statistics).
const void* ScaleOf(const OpContext& ctx, const BnGpuCall& c, const TensorView& gamma, void* ones) {
  if (!c.p.fix_gamma) return gamma.raw();
  FillGpu(ctx, 1.0, OpReq::kWrite, c.Stat(ones));
  return ones;
}

// y = relu(x) (y may be x) as `req` says: the relu op's kernel.
void Relu(const OpContext& ctx, const BnGpuCall& c, const void* x, OpReq req, void* y, int64_t n) {
  const int v = PackWidth(c.dtype, {x, y});
  Launch(ctx, "unary.cuh",
         Instance("weft::UnaryForward", {"weft::fn::Relu", TypeName(c.dtype), std::to_string(v)}),
         Packs(n, v), x, y, n, 0.0, 0.0, ReqCode(req));  // relu takes no scalars
}

// ---- cuDNN's persistent mode ----

// Whether this call runs cuDNN's persistent kernels: a channels-last image with its batch's
// statistics, cuDNN writing its outputs (`writes`: no blending into them), and no reserve to keep
// from forward to backward (cuDNN asks for one only with a fused activation; weft has no output to
// keep one in). Not where cuDNN then declines the shape (a NOT_SUPPORTED status): see Persistently.
bool Persistent(const GpuCall& call, const BnGpuCall& c, bool writes) {
  if (!c.batch || !c.channels_last || !writes) return false;
  size_t reserve = 0;
  WEFT_CUDNN_CHECK(call.Cudnn([&](cudnnHandle_t h) {
    return cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, kPersistent, kBnOnly, nullptr,
                                                                c.x.get(), &reserve);
  }));
  return reserve == 0;
}

// The workspace cuDNN's persistent forward (or backward) wants; 0 where the call is not persistent.
size_t PersistentBytes(const GpuCall& call, const BnGpuCall& c, bool persistent, bool backward) {
  size_t bytes = 0;
  if (!persistent) return 0;
  WEFT_CUDNN_CHECK(call.Cudnn([&](cudnnHandle_t h) {
    return backward ? cudnnGetBatchNormalizationBackwardExWorkspaceSize(
                          h, kPersistent, kBnOnly, c.x.get(), nullptr, c.x.get(), nullptr,
                          c.x.get(), c.stats.get(), nullptr, &bytes)
                    : cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                          h, kPersistent, kBnOnly, c.x.get(), nullptr, c.x.get(), c.stats.get(),
                          nullptr, &bytes);
  }));
  return bytes;
}

// Runs `ex` (a persistent call) where `persistent`, and `plain` (the spatial mode's) instead, or
// after `ex` returned CUDNN_STATUS_NOT_SUPPORTED (a shape its kernels do not take).
template <typename Ex, typename Plain>
void Persistently(const GpuCall& call, bool persistent, Ex ex, Plain plain) {
  if (persistent) {
    const cudnnStatus_t status = call.Cudnn(ex);
    if (status != CUDNN_STATUS_NOT_SUPPORTED) {
      WEFT_CUDNN_CHECK(status);
      return;
    }
  }
  WEFT_CUDNN_CHECK(call.Cudnn(plain));
}

// ---- Forward ----

// Where the forward writes: cuDNN's y (the output, else scratch when relu must follow it into an
// output that adds, or nobody reads it) and the saved statistics (scratch where not requested).
struct ForwardTargets {
  void *y, *mean, *invstd, *ones;
  OpReq y_req;  // how cuDNN writes y
  bool persistent;
  void* cudnn;  // the persistent call's workspace
  size_t cudnn_bytes;
};

ForwardTargets TargetsOf(const GpuCall& call, const BnGpuCall& c, std::span<const OpReq> req,
                         std::span<const TensorView> out) {
  const bool y_scratch = req[0] == OpReq::kNull || (c.relu() && req[0] == OpReq::kAddTo);
  const OpReq y_req = y_scratch || c.relu() ? OpReq::kWrite : req[0];
  const bool persistent = Persistent(call, c, y_req == OpReq::kWrite);
  const size_t cudnn_bytes = PersistentBytes(call, c, persistent, /*backward=*/false);
  const std::vector<void*> ws = call.Workspace(
      {y_scratch ? out[0].bytes() : 0, req[1] == OpReq::kNull ? c.StatBytes() : 0,
       req[2] == OpReq::kNull ? c.StatBytes() : 0, c.p.fix_gamma ? c.StatBytes() : 0, cudnn_bytes});
  return {y_scratch ? ws[0] : out[0].raw(),
          ws[1] ? ws[1] : out[1].raw(),
          ws[2] ? ws[2] : out[2].raw(),
          ws[3],
          y_req,
          persistent,
          ws[4],
          cudnn_bytes};
}

// With the batch's statistics; moves the running ones (in[3], in[4]) and saves mean and invstd.
void TrainingForward(const GpuCall& call, const BnGpuCall& c, std::span<const TensorView> in,
                     const ForwardTargets& t, const void* scale) {
  const auto alpha = One(c.dtype), beta = BetaFor(t.y_req, c.dtype);
  Persistently(
      call, t.persistent,
      [&](cudnnHandle_t h) {
        return cudnnBatchNormalizationForwardTrainingEx(
            h, kPersistent, kBnOnly, alpha.get(), beta.get(), c.x.get(), in[0].raw(), nullptr,
            nullptr, c.x.get(), t.y, c.stats.get(), scale, in[2].raw(), 1 - c.p.momentum,
            in[3].raw(), in[4].raw(), c.p.eps, t.mean, t.invstd, nullptr, t.cudnn, t.cudnn_bytes,
            nullptr, 0);
      },
      [&](cudnnHandle_t h) {
        return cudnnBatchNormalizationForwardTraining(
            h, kSpatial, alpha.get(), beta.get(), c.x.get(), in[0].raw(), c.x.get(), t.y,
            c.stats.get(), scale, in[2].raw(), 1 - c.p.momentum, in[3].raw(), in[4].raw(), c.p.eps,
            t.mean, t.invstd);
      });
}

// With the moving statistics, which become the saved ones.
void InferenceForward(const GpuCall& call, const BnGpuCall& c, std::span<const TensorView> in,
                      const ForwardTargets& t, const void* scale) {
  WEFT_CUDNN_CHECK(call.Cudnn([&](cudnnHandle_t h) {
    return cudnnBatchNormalizationForwardInference(
        h, kSpatial, One(c.dtype).get(), BetaFor(t.y_req, c.dtype).get(), c.x.get(), in[0].raw(),
        c.x.get(), t.y, c.stats.get(), scale, in[2].raw(), in[3].raw(), in[4].raw(), c.p.eps);
  }));
  const OpContext& ctx = call.ctx();
  CopyGpu(ctx, in[3], OpReq::kWrite, c.Stat(t.mean));
  Launch(ctx, "batch_norm.cuh", Instance("weft::BnInvStd", {TypeName(c.stat)}), c.d.c, in[4].raw(),
         t.invstd, c.d.c, c.p.eps);
}

// in: (data, gamma, beta, moving_mean, moving_var); out: (output, saved_mean, saved_invstd).
void BnForwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  const GpuCall call(ctx);
  const BnGpuCall c = CallOf("BatchNorm", a, in[0], ctx.is_train);
  if (!c.batch && req[0] == OpReq::kNull && req[1] == OpReq::kNull && req[2] == OpReq::kNull)
    return;
  const ForwardTargets t = TargetsOf(call, c, req, out);
  const void* scale = ScaleOf(ctx, c, in[1], t.ones);
  if (c.batch) {
    TrainingForward(call, c, in, t, scale);
  } else {
    InferenceForward(call, c, in, t, scale);
  }
  if (c.relu() && req[0] != OpReq::kNull) Relu(ctx, c, t.y, req[0], out[0].raw(), in[0].size());
}

// ---- Backward ----

// Where the backward writes when it runs cuDNN's (`cudnn`): d_data (scratch when unread, or with
// constant statistics, where cuDNN's d_data is not the gradient), d_gamma and d_beta (scratch
// unless both are written alike without fix_gamma: cuDNN takes one beta for the two); and its own
// temporaries.
struct BackwardTargets {
  void *dx, *d_gamma, *d_beta, *masked, *ones;
  OpReq dx_req, param_req;  // how cuDNN writes them
  bool params_direct;       // d_gamma and d_beta are the outputs
  bool persistent;
  void* cudnn;  // the persistent call's workspace
  size_t cudnn_bytes;
};

BackwardTargets BackwardTargetsOf(const GpuCall& call, const BnGpuCall& c, bool cudnn,
                                  std::span<const OpReq> req, std::span<const TensorView> out) {
  const bool dx_scratch = cudnn && (req[0] == OpReq::kNull || !c.batch);
  const bool direct = req[1] == req[2] && req[1] != OpReq::kNull && !c.p.fix_gamma;
  const OpReq dx_req = dx_scratch ? OpReq::kWrite : req[0];
  const OpReq param_req = direct ? req[1] : OpReq::kWrite;
  const bool persistent =
      cudnn && Persistent(call, c, dx_req == OpReq::kWrite && param_req == OpReq::kWrite);
  const size_t cudnn_bytes = PersistentBytes(call, c, persistent, /*backward=*/true);
  const size_t stat = cudnn && !direct ? c.StatBytes() : 0;
  const std::vector<void*> ws =
      call.Workspace({dx_scratch ? out[0].bytes() : 0, stat, stat, c.relu() ? out[0].bytes() : 0,
                      c.p.fix_gamma ? c.StatBytes() : 0, cudnn_bytes});
  return {dx_scratch ? ws[0] : out[0].raw(),
          direct ? out[1].raw() : ws[1],
          direct ? out[2].raw() : ws[2],
          ws[3],
          ws[4],
          dx_req,
          param_req,
          direct,
          persistent,
          ws[5],
          cudnn_bytes};
}

// out_grad where output > 0, else 0, into `masked`: relu's gradient kernel, reading the output.
const void* MaskedByRelu(const OpContext& ctx, const BnGpuCall& c, const TensorView& dy,
                         const TensorView& y, void* masked) {
  const int v = PackWidth(c.dtype, {dy.raw(), y.raw(), masked});
  const int64_t n = dy.size();
  Launch(ctx, "unary.cuh",
         Instance("weft::UnaryBackward", {"weft::fn::Relu", TypeName(c.dtype), std::to_string(v)}),
         Packs(n, v), dy.raw(), y.raw(), masked, n, 0.0, 0.0, ReqCode(OpReq::kWrite));
  return masked;
}

// cuDNN's backward from the saved statistics: d_gamma, d_beta and the batch statistics' d_data.
void CudnnBackward(const GpuCall& call, const BnGpuCall& c, std::span<const TensorView> in,
                   const void* dy, const void* scale, const BackwardTargets& t) {
  const auto one = One(c.dtype), dx_beta = BetaFor(t.dx_req, c.dtype),
             param_beta = BetaFor(t.param_req, c.dtype);
  const void *x = in[kBnData].raw(), *mean = in[kBnSavedMean].raw(),
             *invstd = in[kBnSavedInvstd].raw();
  Persistently(
      call, t.persistent,
      [&](cudnnHandle_t h) {
        return cudnnBatchNormalizationBackwardEx(
            h, kPersistent, kBnOnly, one.get(), dx_beta.get(), one.get(), param_beta.get(),
            c.x.get(), x, nullptr, nullptr, c.x.get(), dy, nullptr, nullptr, c.x.get(), t.dx,
            c.stats.get(), scale, nullptr, t.d_gamma, t.d_beta, c.p.eps, mean, invstd, nullptr,
            t.cudnn, t.cudnn_bytes, nullptr, 0);
      },
      [&](cudnnHandle_t h) {
        return cudnnBatchNormalizationBackward(h, kSpatial, one.get(), dx_beta.get(), one.get(),
                                               param_beta.get(), c.x.get(), x, c.x.get(), dy,
                                               c.x.get(), t.dx, c.stats.get(), scale, t.d_gamma,
                                               t.d_beta, c.p.eps, mean, invstd);
      });
}

// With constant statistics: d_data = gamma * invstd * dy.
void ConstantStatsGrad(const OpContext& ctx, const BnGpuCall& c, std::span<const TensorView> in,
                       const void* dy, OpReq req, const TensorView& dx) {
  const void* gamma = c.p.fix_gamma ? nullptr : in[kBnGamma].raw();
  Launch(ctx, "batch_norm.cuh",
         Instance("weft::BnConstantStatsGrad", {TypeName(c.dtype), TypeName(c.stat)}), dx.size(),
         dy, gamma, in[kBnSavedInvstd].raw(), dx.raw(), dx.size(), c.d.c, c.d.inner, ReqCode(req));
}

// d_gamma and d_beta from scratch into the outputs as requested (0 for d_gamma with fix_gamma).
void StoreParamGrads(const OpContext& ctx, const BnGpuCall& c, const BackwardTargets& t,
                     std::span<const OpReq> req, std::span<const TensorView> out) {
  if (t.params_direct) return;
  if (c.p.fix_gamma) {
    FillGpu(ctx, 0.0, req[1], out[1]);
  } else {
    CopyGpu(ctx, c.Stat(t.d_gamma), req[1], out[1]);
  }
  CopyGpu(ctx, c.Stat(t.d_beta), req[2], out[2]);
}

// in: as BnBackwardInput places them; out: (d_data, d_gamma, d_beta).
void BnBackwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                   std::span<const OpReq> req, std::span<const TensorView> out) {
  const GpuCall call(ctx);
  const BnGpuCall c = CallOf("_backward_BatchNorm", a, in[kBnData], ctx.is_train);
  const bool params = req[1] != OpReq::kNull || req[2] != OpReq::kNull;
  if (req[0] == OpReq::kNull && !params) return;
  const bool cudnn = params || c.batch;
  const BackwardTargets t = BackwardTargetsOf(call, c, cudnn, req, out);
  const void* dy = c.relu() ? MaskedByRelu(ctx, c, in[kBnOutGrad], in[kBnOutput], t.masked)
                            : in[kBnOutGrad].raw();
  if (cudnn) CudnnBackward(call, c, in, dy, ScaleOf(ctx, c, in[kBnGamma], t.ones), t);
  if (!c.batch && req[0] != OpReq::kNull) ConstantStatsGrad(ctx, c, in, dy, req[0], out[0]);
  StoreParamGrads(ctx, c, t, req, out);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {
                               {"BatchNorm", {.compute = BnForwardGpu}},
                               {"_backward_BatchNorm", {.compute = BnBackwardGpu}},
                           });

}  // namespace
}  // namespace weft::gpu
