#include "ops/gpu/internal/lt_matmul.h"

#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>

#include "core/error.h"
#include "ops/gpu/library_handles.h"

namespace weft::gpu {

namespace {

constexpr size_t kLtWorkspace = size_t{32} << 20;

cublasLtHandle_t LtHandle() {
  // cuBLASLt handles hold no stream and are thread-safe: one for the process (never destroyed,
  // like the other library handles).
  static cublasLtHandle_t handle = [] {
    cublasLtHandle_t h = nullptr;
    WEFT_CUBLAS_CHECK(cublasLtCreate(&h));
    return h;
  }();
  return handle;
}

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
};

// A column-major (rows, cols) layout with leading dimension `ld`; `count` matrices `stride`
// elements apart when count > 1.
cublasLtMatrixLayout_t Layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                              int count = 1, int64_t stride = 0) {
  cublasLtMatrixLayout_t layout = nullptr;
  WEFT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld));
  if (count > 1) {
    WEFT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                       &count, sizeof(count)));
    WEFT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return layout;
}

// A descriptor computing in FP32 (float32: strict, no TF32; bfloat16) or FP64 (float64).
cublasLtMatmulDesc_t Desc(DType dtype, cublasOperation_t trans_a, cublasOperation_t trans_b) {
  const bool f64 = dtype == DType::kFloat64;
  cublasLtMatmulDesc_t desc = nullptr;
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F,
                                             f64 ? CUDA_R_64F : CUDA_R_32F));
  WEFT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  WEFT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  return desc;
}

// Sets p.algo and p.workspace: cuBLASLt's first choice within kLtWorkspace for pointers aligned
// to `alignment` bytes (cuBLASLt assumes 256 unless told). `what` names the product for the error
// when there is none.
void PickAlgo(Plan& p, const char* what, int64_t m, int64_t n, int64_t k,
              uint32_t alignment = 256) {
  cublasLtMatmulPreference_t pref = nullptr;
  WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kLtWorkspace, sizeof(kLtWorkspace)));
  for (const auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    WEFT_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, attr, &alignment, sizeof(alignment)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(LtHandle(), p.desc, p.a, p.b, p.d,
                                                               p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  WEFT_CUBLAS_CHECK(status);
  if (found == 0)
    WEFT_THROW(what << " on the GPU: cuBLASLt has no algorithm for " << m << "x" << n << "x" << k);
  p.algo = result.algo;
  p.workspace = result.workspaceSize;
}

// ---- LtBiasGemm ----

cublasLtEpilogue_t CublasEpilogue(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::kReluBias:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    case LtEpilogue::kGeluTanhBias:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
  }
  return CUBLASLT_EPILOGUE_BIAS;
}

// Desc with `epilogue`, whose bias (or bias gradient) has type bias_dtype (the operands', or D's
// where D is float32 over 16-bit operands).
cublasLtMatmulDesc_t EpilogueDesc(DType dtype, cublasOperation_t trans_a, cublasOperation_t trans_b,
                                  cublasLtEpilogue_t epilogue, DType bias_dtype) {
  const cudaDataType_t type = CudaType(bias_dtype);
  cublasLtMatmulDesc_t desc = Desc(dtype, trans_a, trans_b);
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                   sizeof(epilogue)));
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type,
                                                   sizeof(type)));
  return desc;
}

// D = A op B (+ D when accumulating) through plan p, its epilogue's bias pointer `bias`, on the
// call's stream after the kernels batched so far.
void RunWithBias(const GpuCall& call, Plan& p, const void* bias, const void* a, const void* b,
                 void* d, bool accumulate) {
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                   sizeof(bias)));
  const float alpha = 1, beta = accumulate ? 1 : 0;
  void* workspace = p.workspace == 0 ? nullptr : call.Workspace({p.workspace})[0];
  call.stream().Library([&](cudaStream_t s) {
    WEFT_CUBLAS_CHECK(cublasLtMatmul(LtHandle(), p.desc, &alpha, a, p.a, b, p.b, &beta, d, p.d, d,
                                     p.d, &p.algo, workspace, p.workspace, s));
  });
}

// The plan of `key` in `plans`, made by make() the first time.
template <typename Map, typename Make>
typename Map::mapped_type& PlanIn(Map& plans, const typename Map::key_type& key, Make&& make) {
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make()).first;
  return it->second;
}

Plan MakeBiasPlan(DType dtype, const LtGemmShape& s, LtEpilogue e) {
  const cudaDataType_t type = CudaType(dtype);
  Plan p;
  p.desc = EpilogueDesc(dtype, CUBLAS_OP_T, CUBLAS_OP_N, CublasEpilogue(e), dtype);
  p.a = Layout(type, s.k, s.m, s.k);
  p.b = Layout(type, s.k, s.n, s.k);
  p.d = Layout(type, s.m, s.n, s.m);
  PickAlgo(p, "FullyConnected", s.m, s.n, s.k);
  return p;
}

// The plan for this shape, made once per thread (a plan's bias pointer is set per call).
Plan& BiasPlanFor(DType dtype, const LtGemmShape& s, LtEpilogue e, int device) {
  thread_local std::map<std::tuple<int, int, int64_t, int64_t, int64_t, int>, Plan> plans;
  const auto key =
      std::make_tuple(device, static_cast<int>(dtype), s.m, s.n, s.k, static_cast<int>(e));
  return PlanIn(plans, key, [&] { return MakeBiasPlan(dtype, s, e); });
}

// ---- LtWeightGradGemm ----

// The plan, or none where cuBLASLt has no algorithm for the BGRADB epilogue on this shape. D and
// the bias gradient of type grad_dtype.
std::optional<Plan> MakeWeightGradPlan(DType dtype, DType grad_dtype, const LtGemmShape& s) {
  const cudaDataType_t type = CudaType(dtype);
  Plan p;
  p.desc = EpilogueDesc(dtype, CUBLAS_OP_N, CUBLAS_OP_T, CUBLASLT_EPILOGUE_BGRADB, grad_dtype);
  p.a = Layout(type, s.m, s.k, s.m);
  p.b = Layout(type, s.n, s.k, s.n);
  p.d = Layout(CudaType(grad_dtype), s.m, s.n, s.m);
  try {
    PickAlgo(p, "FullyConnected's weight gradient", s.m, s.n, s.k);
  } catch (const Error&) {  // no algorithm: the caller's GEMM and reduction
    return std::nullopt;
  }
  return p;
}

std::optional<Plan>& WeightGradPlanFor(DType dtype, DType grad_dtype, const LtGemmShape& s,
                                       int device) {
  thread_local std::map<std::tuple<int, int, int, int64_t, int64_t, int64_t>, std::optional<Plan>>
      plans;
  const auto key =
      std::make_tuple(device, static_cast<int>(dtype), static_cast<int>(grad_dtype), s.m, s.n, s.k);
  return PlanIn(plans, key, [&] { return MakeWeightGradPlan(dtype, grad_dtype, s); });
}

// ---- LtBatchGemm ----

// How a BatchGemm's batch reaches cuBLASLt: `count` matrices per call at these strides, and
// `calls` calls `outer_*` elements apart (the first batch axis, when its strides do not merge
// with the second's).
struct LtBatch {
  int64_t count = 1;
  std::array<int64_t, 3> stride = {};  // x, y, z
  int64_t calls = 1;
  std::array<int64_t, 3> outer = {};

  // The alignment every call's pointers keep when the tensors start 256-byte aligned.
  uint32_t Alignment(int64_t element_bytes) const {
    uint32_t alignment = 256;
    for (int t = 0; t < 3 && calls > 1; ++t) {
      while (outer[t] * element_bytes % alignment != 0) alignment /= 2;
    }
    return alignment;
  }
};

LtBatch BatchOf(const BatchGemm& g) {
  const std::array<const std::array<int64_t, kBatchAxes>*, 3> s = {&g.x_stride, &g.y_stride,
                                                                   &g.z_stride};
  LtBatch b;
  const int axis = g.batch[1] > 1 ? 1 : 0;  // the axis a single call steps along
  b.count = g.batch[axis];
  for (int t = 0; t < 3; ++t) b.stride[t] = (*s[t])[axis];
  if (axis == 0 || g.batch[0] == 1) return b;
  bool merges = true;
  for (int t = 0; t < 3; ++t) merges &= (*s[t])[0] == (*s[t])[1] * g.batch[1];
  if (merges) {
    b.count = g.Count();
    return b;
  }
  b.calls = g.batch[0];
  for (int t = 0; t < 3; ++t) b.outer[t] = (*s[t])[0];
  return b;
}

// Row-major z (m, n) = op(x) op(y) is column-major z^T (n, m) = op(y)^T op(x)^T: A is y, B is x,
// each stored as its row-major matrix read column-major.
Plan MakeBatchPlan(DType dtype, const BatchGemm& g, const LtBatch& b) {
  const cudaDataType_t type = CudaType(dtype);
  const int count = CheckedInt("batch_dot", b.count);
  Plan p;
  p.desc =
      Desc(dtype, g.trans_y ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_x ? CUBLAS_OP_T : CUBLAS_OP_N);
  const int64_t a_rows = g.trans_y ? g.k : g.n, a_cols = g.trans_y ? g.n : g.k;
  const int64_t b_rows = g.trans_x ? g.m : g.k, b_cols = g.trans_x ? g.k : g.m;
  p.a = Layout(type, a_rows, a_cols, a_rows, count, b.stride[1]);
  p.b = Layout(type, b_rows, b_cols, b_rows, count, b.stride[0]);
  p.d = Layout(type, g.n, g.m, g.n, count, b.stride[2]);
  PickAlgo(p, "batch_dot", g.m, g.n, g.k, b.Alignment(static_cast<int64_t>(DTypeSize(dtype))));
  return p;
}

Plan& BatchPlanFor(DType dtype, const BatchGemm& g, const LtBatch& b, int device) {
  using Key = std::array<int64_t, 12>;
  thread_local std::map<Key, Plan> plans;
  const int64_t alignment = b.Alignment(static_cast<int64_t>(DTypeSize(dtype)));
  const Key key = {device,      static_cast<int64_t>(dtype),
                   g.m,         g.n,
                   g.k,         g.trans_x,
                   g.trans_y,   b.count,
                   b.stride[0], b.stride[1],
                   b.stride[2], alignment};
  return PlanIn(plans, key, [&] { return MakeBatchPlan(dtype, g, b); });
}

}  // namespace

bool LtBiasGemmSupports(DType dtype) { return dtype == DType::kFloat32 || Is16BitFloat(dtype); }

void LtBiasGemm(const GpuCall& call, DType dtype, const LtGemmShape& shape, const void* a,
                const void* b, const void* bias, void* d, bool accumulate, LtEpilogue epilogue) {
  if (accumulate && epilogue != LtEpilogue::kBias)
    WEFT_THROW("LtBiasGemm: an activation epilogue cannot accumulate into its output");
  RunWithBias(call, BiasPlanFor(dtype, shape, epilogue, call.device()), bias, a, b, d, accumulate);
}

bool LtWeightGradGemm(const GpuCall& call, DType dtype, DType grad_dtype, const LtGemmShape& shape,
                      const void* a, const void* b, void* d, bool accumulate, void* bias_grad) {
  std::optional<Plan>& plan = WeightGradPlanFor(dtype, grad_dtype, shape, call.device());
  if (!plan) return false;
  RunWithBias(call, *plan, bias_grad, a, b, d, accumulate);
  return true;
}

size_t LtBatchGemmWorkspace(const GpuCall& call, DType dtype, const BatchGemm& g) {
  return BatchPlanFor(dtype, g, BatchOf(g), call.device()).workspace;
}

void LtBatchGemm(const GpuCall& call, DType dtype, const BatchGemm& g, const void* x, const void* y,
                 void* z, bool accumulate, void* workspace) {
  const LtBatch b = BatchOf(g);
  const Plan& p = BatchPlanFor(dtype, g, b, call.device());
  const Scalar alpha = One(dtype), beta(dtype, accumulate ? 1.0 : 0.0);
  const int64_t bytes = static_cast<int64_t>(DTypeSize(dtype));
  call.stream().Library([&](cudaStream_t s) {  // after the kernels batched so far on the stream
    for (int64_t i = 0; i < b.calls; ++i) {
      const auto* xi = static_cast<const char*>(x) + i * b.outer[0] * bytes;
      const auto* yi = static_cast<const char*>(y) + i * b.outer[1] * bytes;
      auto* zi = static_cast<char*>(z) + i * b.outer[2] * bytes;
      WEFT_CUBLAS_CHECK(cublasLtMatmul(LtHandle(), p.desc, alpha.get(), yi, p.a, xi, p.b,
                                       beta.get(), zi, p.d, zi, p.d, &p.algo, workspace,
                                       p.workspace, s));
    }
  });
}

}  // namespace weft::gpu
