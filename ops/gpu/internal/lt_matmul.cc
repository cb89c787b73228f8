#include "ops/gpu/internal/lt_matmul.h"

#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

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

cublasLtMatrixLayout_t Layout(cudaDataType_t type, int64_t rows, int64_t cols) {
  cublasLtMatrixLayout_t layout = nullptr;
  WEFT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, rows));
  return layout;
}

Plan MakePlan(DType dtype, const LtGemmShape& s) {
  const cudaDataType_t type = CudaType(dtype);
  Plan p;
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                                   sizeof(trans_a)));
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                                   sizeof(trans_b)));
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                   sizeof(epilogue)));
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                   &type, sizeof(type)));
  p.a = Layout(type, s.k, s.m);
  p.b = Layout(type, s.k, s.n);
  p.d = Layout(type, s.m, s.n);
  cublasLtMatmulPreference_t pref = nullptr;
  WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  WEFT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kLtWorkspace, sizeof(kLtWorkspace)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(LtHandle(), p.desc, p.a, p.b, p.d,
                                                               p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  WEFT_CUBLAS_CHECK(status);
  if (found == 0)
    WEFT_THROW("FullyConnected on the GPU: cuBLASLt has no algorithm for " << s.m << "x" << s.n
                                                                           << "x" << s.k);
  p.algo = result.algo;
  p.workspace = result.workspaceSize;
  return p;
}

// The plan for this shape, made once per thread (a plan's bias pointer is set per call).
Plan& PlanFor(DType dtype, const LtGemmShape& s, int device) {
  thread_local std::map<std::tuple<int, int, int64_t, int64_t, int64_t>, Plan> plans;
  const auto key = std::make_tuple(device, static_cast<int>(dtype), s.m, s.n, s.k);
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, MakePlan(dtype, s)).first;
  return it->second;
}

}  // namespace

bool LtBiasGemmSupports(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kBFloat16;
}

void LtBiasGemm(const GpuCall& call, DType dtype, const LtGemmShape& shape, const void* a,
                const void* b, const void* bias, void* d, bool accumulate) {
  Plan& p = PlanFor(dtype, shape, call.device());
  WEFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                   sizeof(bias)));
  const float alpha = 1, beta = accumulate ? 1 : 0;
  void* workspace = p.workspace == 0 ? nullptr : call.Workspace({p.workspace})[0];
  call.stream().Library([&](cudaStream_t s) {  // after the kernels batched so far on the stream
    WEFT_CUBLAS_CHECK(cublasLtMatmul(LtHandle(), p.desc, &alpha, a, p.a, b, p.b, &beta, d, p.d, d,
                                     p.d, &p.algo, workspace, p.workspace, s));
  });
}

}  // namespace weft::gpu
