// FullyConnected and _backward_FullyConnected on the GPU, through cuBLAS (ops/cpu/fully_connected.cc
// says what they compute). float32 and float64, and bfloat16 with float32 accumulation
// (cublasGemmEx, CUBLAS_COMPUTE_32F); float32 runs true float32 FMA GEMMs (cuBLAS's default math
// mode, no TF32).
//
// Row-major (R, C) memory is a column-major (C, R) matrix, so each product is computed
// transposed, by a column-major GEMM (m, n, k):
//   forward   y^T  (O, M) = (w as (K, O))^T . (x as (K, M))      gemm(T, N, O, M, K)
//   d_data    dx^T (K, M) = (w as (K, O)) . (dy as (O, M))       gemm(N, N, K, M, O)
//   d_weight  dw^T (K, O) = (x as (K, M)) . (dy as (O, M))^T     gemm(N, T, K, O, M)
// Bias takes one more GEMM against a vector of M ones built in the workspace:
//   forward   y^T (O, M) += b (O, 1) . ones (1, M)
//   d_bias    db  (O, 1)  = (dy as (O, M)) . ones (M, 1)
// (a cuBLASLt bias epilogue would fold the forward one into the main GEMM; this keeps one
// mechanism for both directions and all three dtypes).
#include <cstdint>
#include <cstring>
#include <span>

#include "ops/gpu/internal/cudnn_desc.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/internal/nn_params.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

using cpu::FcDims;
using cpu::FcParam;

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

void RunGemm(const GpuCall& call, DType dtype, OpReq req, const Gemm& g) {
  const char* op = "FullyConnected";
  const cudaDataType_t type = CudaType(dtype);
  const cublasComputeType_t compute = dtype == DType::kFloat64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  WEFT_CUBLAS_CHECK(cublasGemmEx(call.cublas(), g.trans_a, g.trans_b, CheckedInt(op, g.m), CheckedInt(op, g.n),
                                 CheckedInt(op, g.k), One(dtype).get(), g.a, type, CheckedInt(op, g.lda), g.b, type,
                                 CheckedInt(op, g.ldb), BetaFor(req, dtype).get(), g.c, type, CheckedInt(op, g.ldc),
                                 compute, CUBLAS_GEMM_DEFAULT));
}

// Fills `ones` (room for `count` elements of `dtype`) with 1, on the call's stream. cudnnSetTensor
// writes 32- or 64-bit values; two bfloat16 ones are the 32-bit pattern 0x3F803F80, which
// float32 represents exactly (about 1.0039), so a float32 fill writes them bit for bit.
void FillOnes(const GpuCall& call, DType dtype, int64_t count, void* ones) {
  DType fill_type = dtype;
  double value = 1.0;
  if (dtype == DType::kBFloat16) {
    fill_type = DType::kFloat32;
    count = (count + 1) / 2;
    const uint32_t pair = 0x3F803F80u;
    float word;
    static_assert(sizeof(word) == sizeof(pair));
    std::memcpy(&word, &pair, sizeof(word));
    value = word;
  }
  TensorDesc desc = ChannelDesc("FullyConnected", fill_type, count);
  const Scalar fill(fill_type, value);
  WEFT_CUDNN_CHECK(cudnnSetTensor(call.cudnn(), desc.get(), ones, fill.get()));
}

constexpr std::initializer_list<DType> kFcTypes = {DType::kFloat32, DType::kFloat64, DType::kBFloat16};

// A vector of m ones of `dtype`, in the call's workspace (one element more than m, for the
// bfloat16 fill's last 32-bit word).
const void* Ones(const GpuCall& call, DType dtype, int64_t m) {
  void* ones = call.Workspace({static_cast<size_t>(m + 1) * DTypeSize(dtype)})[0];
  FillOnes(call, dtype, m, ones);
  return ones;
}

// in: (data (M, K), weight (O, K)[, bias (O,)]); out: (output (M, O)).
void FcForwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                  std::span<const TensorView> out) {
  const FcParam& p = a.Get<FcParam>();
  const FcDims d = cpu::FcDimsOf(p, in[0].shape());
  if (req[0] == OpReq::kNull) return;
  const DType dtype = in[0].dtype();
  CheckDType("FullyConnected", dtype, kFcTypes);
  const GpuCall call(ctx);
  void* y = out[0].raw();
  RunGemm(call, dtype, req[0], {CUBLAS_OP_T, CUBLAS_OP_N, d.o, d.m, d.k, in[1].raw(), d.k, in[0].raw(), d.k, y, d.o});
  if (p.no_bias) return;
  const void* ones = Ones(call, dtype, d.m);
  RunGemm(call, dtype, OpReq::kAddTo, {CUBLAS_OP_N, CUBLAS_OP_N, d.o, d.m, 1, in[2].raw(), d.o, ones, 1, y, d.o});
}

// in: (out_grad (M, O), data (M, K), weight (O, K)); out: (d_data, d_weight[, d_bias]), each
// skipped when its request is kNull.
void FcBackwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                   std::span<const TensorView> out) {
  const FcParam& p = a.Get<FcParam>();
  const FcDims d = cpu::FcDimsOf(p, in[1].shape());
  const DType dtype = in[0].dtype();
  CheckDType("_backward_FullyConnected", dtype, kFcTypes);
  const GpuCall call(ctx);
  const void *dy = in[0].raw(), *x = in[1].raw(), *w = in[2].raw();
  if (req[0] != OpReq::kNull) {
    RunGemm(call, dtype, req[0], {CUBLAS_OP_N, CUBLAS_OP_N, d.k, d.m, d.o, w, d.k, dy, d.o, out[0].raw(), d.k});
  }
  if (req[1] != OpReq::kNull) {
    RunGemm(call, dtype, req[1], {CUBLAS_OP_N, CUBLAS_OP_T, d.k, d.o, d.m, x, d.k, dy, d.o, out[1].raw(), d.k});
  }
  if (p.no_bias || req[2] == OpReq::kNull) return;
  const void* ones = Ones(call, dtype, d.m);
  RunGemm(call, dtype, req[2], {CUBLAS_OP_N, CUBLAS_OP_N, d.o, 1, d.m, dy, d.o, ones, d.m, out[2].raw(), d.o});
}

WEFT_REGISTER_COMPUTE(FullyConnected, DeviceType::kGpu, FcForwardGpu);
WEFT_REGISTER_COMPUTE(_backward_FullyConnected, DeviceType::kGpu, FcBackwardGpu);

}  // namespace
}  // namespace weft::gpu
