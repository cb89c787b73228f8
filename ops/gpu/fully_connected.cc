// FullyConnected and _backward_FullyConnected on the GPU, through cuBLAS (ops/nn/fully_connected.cc
// says what they compute). float32 and float64, and bfloat16 with float32 accumulation
// (cublasGemmEx, CUBLAS_COMPUTE_32F); float32 runs true float32 FMA GEMMs (cuBLAS's default math
// mode, no TF32).
//
// Row-major (R, C) memory is a column-major (C, R) matrix, so each product is computed
// transposed, by a column-major GEMM (m, n, k):
//   forward   y^T  (O, M) = (w as (K, O))^T . (x as (K, M))      gemm(T, N, O, M, K)
//   d_data    dx^T (K, M) = (w as (K, O)) . (dy as (O, M))       gemm(N, N, K, M, O)
//   d_weight  dw^T (K, O) = (x as (K, M)) . (dy as (O, M))^T     gemm(N, T, K, O, M)
// Bias: the forward adds it in cuBLASLt's epilogue (internal/lt_matmul.h; float32 and bfloat16),
// or, for float64, writes the bias rows into y and lets the GEMM add to them (beta = 1); either
// way a bf16 output is rounded once. d_bias comes with d_weight from cuBLASLt's BGRADB epilogue
// (one call, the sums in float32 rounded once); where d_bias is added to, or cuBLASLt declines,
// a GEMM gives d_weight and a kernel sums dy's rows (kernels/fully_connected.cuh). With
// param_grad_dtype float32 over 16-bit data, d_weight and d_bias are float32 (cuBLAS's C and D of
// float32 over 16-bit operands), the master gradients of a mixed-precision step. An activation
// epilogue (act_type) is cuBLASLt's where it has one (relu, gelu_tanh, with a bias, float32 and
// bfloat16), else Activation's kernel after the GEMM.
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "ops/gpu/internal/activation.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"
#include "ops/gpu/internal/lt_matmul.h"
#include "ops/gpu/internal/reduce.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// One column-major GEMM: c (m, n) = op(a) op(b) + beta * c, where beta comes from the request.
struct Gemm {
  cublasOperation_t trans_a, trans_b;
  int64_t m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* c;
  int64_t ldc;
};

// c of type c_dtype: dtype, or float32 over 16-bit a and b (the sums rounded once, into float32).
void RunGemm(const GpuCall& call, DType dtype, OpReq req, const Gemm& g,
             std::optional<DType> c_dtype = std::nullopt) {
  const char* op = "FullyConnected";
  const cudaDataType_t type = CudaType(dtype), c_type = CudaType(c_dtype.value_or(dtype));
  const cublasComputeType_t compute =
      dtype == DType::kFloat64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  WEFT_CUBLAS_CHECK(call.Cublas([&](cublasHandle_t h) {
    return cublasGemmEx(h, g.trans_a, g.trans_b, CheckedInt(op, g.m), CheckedInt(op, g.n),
                        CheckedInt(op, g.k), One(dtype).get(), g.a, type, CheckedInt(op, g.lda),
                        g.b, type, CheckedInt(op, g.ldb), BetaFor(req, dtype).get(), g.c, c_type,
                        CheckedInt(op, g.ldc), compute, CUBLAS_GEMM_DEFAULT);
  }));
}

constexpr std::initializer_list<DType> kFcTypes = {DType::kFloat32, DType::kFloat64,
                                                   DType::kBFloat16, DType::kFloat16};

// y (M, O) = x W^T + b with request `req` (not kNull) from in = (x, w[, b]); through cuBLASLt's
// bias epilogue where `lt` allows (it asks the call for workspace), else a GEMM (beta 1) over
// the bias rows.
void FcGemm(const OpContext& ctx, const GpuCall& call, const FcParam& p, const FcDims& d,
            std::span<const TensorView> in, OpReq req, void* y, bool lt) {
  const DType dtype = in[0].dtype();
  if (!p.no_bias && lt && LtBiasGemmSupports(dtype)) {  // the bias in cuBLASLt's epilogue
    LtBiasGemm(call, dtype, {d.o, d.m, d.k}, in[1].raw(), in[0].raw(), in[2].raw(), y,
               req == OpReq::kAddTo);
    return;
  }
  OpReq gemm_req = req;
  if (!p.no_bias) {  // y starts from the bias rows; the GEMM adds x * W^T to them
    Launch(ctx, "fully_connected.cuh", Instance("weft::BiasRows", {TypeName(dtype)}), d.m * d.o,
           in[2].raw(), y, d.m, d.o, ReqCode(req));
    gemm_req = OpReq::kAddTo;
  }
  RunGemm(call, dtype, gemm_req,
          {CUBLAS_OP_T, CUBLAS_OP_N, d.o, d.m, d.k, in[1].raw(), d.k, in[0].raw(), d.k, y, d.o});
}

// cuBLASLt's epilogue for an activation it has (relu; GELU's tanh form), or none.
std::optional<LtEpilogue> LtActivation(ActType act) {
  if (act == ActType::kRelu) return LtEpilogue::kReluBias;
  if (act == ActType::kGeluTanh) return LtEpilogue::kGeluTanhBias;
  return std::nullopt;
}

// FullyConnected with its activation epilogue `act`: in cuBLASLt's epilogue where it has one, else
// the activation kernel after the GEMM (in place; from a workspace when adding to y).
void FcActForward(const OpContext& ctx, const GpuCall& call, const FcParam& p, const FcDims& d,
                  std::span<const TensorView> in, OpReq req, const TensorView& y) {
  const DType dtype = in[0].dtype();
  const std::optional<LtEpilogue> lt = LtActivation(*p.act);
  if (req != OpReq::kAddTo && lt && !p.no_bias && LtBiasGemmSupports(dtype)) {
    LtBiasGemm(call, dtype, {d.o, d.m, d.k}, in[1].raw(), in[0].raw(), in[2].raw(), y.raw(), false,
               *lt);
    return;
  }
  if (req != OpReq::kAddTo) {
    FcGemm(ctx, call, p, d, in, req, y.raw(), /*lt=*/true);
    LaunchActivation(ctx, *p.act, y, OpReq::kWriteInplace, y);
    return;
  }
  void* pre = call.Workspace({y.size() * DTypeSize(dtype)})[0];  // FcGemm asks for no more
  FcGemm(ctx, call, p, d, in, OpReq::kWrite, pre, /*lt=*/false);
  LaunchActivation(ctx, *p.act, TensorView(pre, y.shape(), dtype, y.device()), OpReq::kAddTo, y);
}

// in: (data (M, K), weight (O, K)[, bias (O,)]); out: (output (M, O)).
void FcForwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  const FcParam& p = a.Get<FcParam>();
  const FcDims d = FcDimsOf(p, in[0].shape());
  if (req[0] == OpReq::kNull) return;
  CheckDType("FullyConnected", in[0].dtype(), kFcTypes);
  const GpuCall call(ctx);
  if (p.act) {
    FcActForward(ctx, call, p, d, in, req[0], out[0]);
  } else {
    FcGemm(ctx, call, p, d, in, req[0], out[0].raw(), /*lt=*/true);
  }
}

// d_bias (O) of type grad_dtype = the sum of dy's M rows, as `req` says: a reduction, or, into
// float32 from 16-bit dy (param_grad_dtype), a GEMM of dy by a column of ones (the sums in
// float32, rounded once).
void FcBiasGrad(const OpContext& ctx, const GpuCall& call, const FcDims& d, const TensorView& dy,
                OpReq req, const TensorView& d_bias) {
  if (d_bias.dtype() == dy.dtype())
    return SumRowsGpu(ctx, dy.Reshaped(Shape{d.m, d.o}), req, d_bias);
  void* ones = call.Workspace({static_cast<size_t>(d.m) * DTypeSize(dy.dtype())})[0];
  FillGpu(ctx, 1.0, OpReq::kWrite, TensorView(ones, Shape{d.m}, dy.dtype(), dy.device()));
  RunGemm(call, dy.dtype(), req,
          {CUBLAS_OP_N, CUBLAS_OP_N, d.o, 1, d.m, dy.raw(), d.o, ones, d.m, d_bias.raw(), d.o},
          d_bias.dtype());
}

// in: (out_grad (M, O), data (M, K), weight (O, K)); out: (d_data, d_weight[, d_bias]), each
// skipped when its request is kNull; d_weight and d_bias of param_grad_dtype (float32 over 16-bit
// data) or the data's.
void FcBackwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                   std::span<const OpReq> req, std::span<const TensorView> out) {
  const FcParam& p = a.Get<FcParam>();
  const FcDims d = FcDimsOf(p, in[1].shape());
  const DType dtype = in[0].dtype(), grads = out[1].dtype();
  CheckDType("_backward_FullyConnected", dtype, kFcTypes);
  const GpuCall call(ctx);
  const void *dy = in[0].raw(), *x = in[1].raw(), *w = in[2].raw();
  if (req[0] != OpReq::kNull) {
    RunGemm(call, dtype, req[0],
            {CUBLAS_OP_N, CUBLAS_OP_N, d.k, d.m, d.o, w, d.k, dy, d.o, out[0].raw(), d.k});
  }
  // d_weight and a written d_bias in one cuBLASLt call where it has an algorithm for them
  const bool both = req[1] != OpReq::kNull && !p.no_bias && req[2] == OpReq::kWrite &&
                    LtBiasGemmSupports(dtype) &&
                    LtWeightGradGemm(call, dtype, grads, {d.k, d.o, d.m}, x, dy, out[1].raw(),
                                     req[1] == OpReq::kAddTo, out[2].raw());
  if (req[1] != OpReq::kNull && !both) {
    RunGemm(call, dtype, req[1],
            {CUBLAS_OP_N, CUBLAS_OP_T, d.k, d.o, d.m, x, d.k, dy, d.o, out[1].raw(), d.k}, grads);
  }
  if (both || p.no_bias || req[2] == OpReq::kNull) return;
  FcBiasGrad(ctx, call, d, in[0], req[2], out[2]);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {
                               {"FullyConnected", {.compute = FcForwardGpu}},
                               {"_backward_FullyConnected", {.compute = FcBackwardGpu}},
                           });

}  // namespace
}  // namespace weft::gpu
