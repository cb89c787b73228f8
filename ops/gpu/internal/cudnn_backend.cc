#include "ops/gpu/internal/cudnn_backend.h"

#include <algorithm>
#include <string>
#include <utility>

namespace weft::gpu {
namespace {

void Check(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  throw CudnnDeclined{std::string(what) + ": " + cudnnGetErrorString(status)};
}

// CUDNN_ATTR_OPERATIONGRAPH_HANDLE, which cuDNN 9 declares deprecated but cudnn-frontend still
// sets (by number, so that the build stays free of deprecation warnings).
constexpr auto kOperationGraphHandle = static_cast<cudnnBackendAttributeName_t>(800);

// Alignment cuDNN may assume of every non-virtual tensor: weft's allocations are 256-byte
// aligned, and its workspace parts too (GpuCall::Workspace).
constexpr int64_t kAlignment = 16;

}  // namespace

BackendDesc::BackendDesc(cudnnBackendDescriptorType_t type) {
  Check(cudnnBackendCreateDescriptor(type, &desc_), "cudnnBackendCreateDescriptor");
}

BackendDesc::~BackendDesc() {
  if (desc_ != nullptr) cudnnBackendDestroyDescriptor(desc_);
}

void BackendDesc::Set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                      int64_t count, const void* values, const char* what) {
  Check(cudnnBackendSetAttribute(desc_, name, type, count, values), what);
}

void BackendDesc::SetDesc(cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value,
                          const char* what) {
  Set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value, what);
}

void BackendDesc::Finalize(const char* what) { Check(cudnnBackendFinalize(desc_), what); }

Dims4 DenseStrides(const Dims4& dims) {
  return {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
}

BackendDesc& BackendGraph::Add(cudnnBackendDescriptorType_t type) {
  parts_.emplace_back(type);
  return parts_.back();
}

cudnnBackendDescriptor_t BackendGraph::Tensor(const TensorSpec& s) {
  BackendDesc& t = Add(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.Set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &s.type, "tensor type");
  t.Set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, s.dims.data(), "tensor dims");
  t.Set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, s.strides.data(), "tensor strides");
  t.Set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &s.uid, "tensor uid");
  t.Set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kAlignment, "tensor alignment");
  t.Set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &s.is_virtual, "tensor virtual");
  if (s.by_value) {
    t.Set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &s.by_value, "tensor by value");
  }
  t.Finalize("tensor");
  return t.get();
}

cudnnBackendDescriptor_t BackendGraph::Virtual(cudnnDataType_t type, const Dims4& dims,
                                               const Dims4& strides) {
  return Tensor({next_virtual_uid_++, type, dims, strides, /*is_virtual=*/true});
}

cudnnBackendDescriptor_t BackendGraph::Scalar(int64_t uid) {
  return Tensor({uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, /*by_value=*/true});
}

cudnnBackendDescriptor_t BackendGraph::AddOperation(BackendDesc& op, const char* what) {
  op.Finalize(what);
  ops_.push_back(op.get());
  return op.get();
}

void BackendGraph::Matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                          cudnnBackendDescriptor_t c) {
  BackendDesc& m = Add(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  m.Set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "matmul compute type");
  m.Finalize("matmul descriptor");
  BackendDesc& op = Add(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.SetDesc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, "matmul a");
  op.SetDesc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, "matmul b");
  op.SetDesc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, "matmul c");
  op.SetDesc(CUDNN_ATTR_OPERATION_MATMUL_DESC, m.get(), "matmul descriptor");
  AddOperation(op, "matmul");
}

void BackendGraph::Pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                             cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t b,
                             cudnnBackendDescriptor_t t, cudnnDataType_t compute, int64_t axis) {
  BackendDesc& pw = Add(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.Set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
  pw.Set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute, "pointwise compute");
  if (mode == CUDNN_POINTWISE_GEN_INDEX) {
    pw.Set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
  }
  pw.Finalize("pointwise descriptor");
  BackendDesc& op = Add(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.SetDesc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw.get(), "pointwise descriptor");
  op.SetDesc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "pointwise x");
  if (b != nullptr) op.SetDesc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, "pointwise b");
  if (t != nullptr) op.SetDesc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, "pointwise t");
  op.SetDesc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "pointwise y");
  const float one = 1.0f;  // alpha1 and alpha2, as cudnn-frontend sets them
  op.Set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, "pointwise alpha1");
  op.Set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, "pointwise alpha2");
  AddOperation(op, "pointwise");
}

void BackendGraph::Reduction(cudnnReduceTensorOp_t reduce, cudnnBackendDescriptor_t x,
                             cudnnBackendDescriptor_t y) {
  BackendDesc& r = Add(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  r.Set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce,
        "reduction operator");
  r.Set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "reduction compute");
  r.Finalize("reduction descriptor");
  BackendDesc& op = Add(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.SetDesc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, "reduction x");
  op.SetDesc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, "reduction y");
  op.SetDesc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r.get(), "reduction descriptor");
  AddOperation(op, "reduction");
}

void BackendGraph::Reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
  BackendDesc& op = Add(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.SetDesc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x, "reshape x");
  op.SetDesc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y, "reshape y");
  AddOperation(op, "reshape");
}

// The engine configurations heuristics `mode` gives for `graph` (none: an empty list).
std::vector<cudnnBackendDescriptor_t> BackendGraph::Configs(const BackendDesc& graph,
                                                            cudnnBackendHeurMode_t mode) {
  BackendDesc& heuristics = Add(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heuristics.SetDesc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph.get(), "heuristics graph");
  heuristics.Set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
  heuristics.Finalize("heuristics");
  int64_t count = 0;
  Check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
        "heuristics result count");
  std::vector<cudnnBackendDescriptor_t> configs;
  for (int64_t i = 0; i < count; ++i)
    configs.push_back(Add(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).get());
  if (count == 0) return configs;
  int64_t returned = 0;
  Check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned, configs.data()),
        "heuristics results");
  configs.resize(static_cast<size_t>(std::clamp<int64_t>(returned, 0, count)));
  return configs;
}

// Heuristics mode A first, then the fallback list (cuDNN 9.14 on an H100 offered no configuration
// of mode A for the attention graphs of gpu_attention_test); the first configuration that
// finalizes gives the plan.
BackendPlan BackendGraph::Build(cudnnHandle_t h) && {
  BackendDesc& graph = Add(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.Set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
            static_cast<int64_t>(ops_.size()), ops_.data(), "graph operations");
  graph.Set(kOperationGraphHandle, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
  graph.Finalize("operation graph");
  std::string last = "no engine configuration finalized", counts;
  for (const auto& [mode, name] :
       {std::pair{CUDNN_HEUR_MODE_A, "mode A"}, std::pair{CUDNN_HEUR_MODE_FALLBACK, "fallback"}}) {
    const std::vector<cudnnBackendDescriptor_t> configs = Configs(graph, mode);
    counts +=
        std::string(counts.empty() ? "" : ", ") + std::to_string(configs.size()) + " of " + name;
    for (cudnnBackendDescriptor_t config : configs) {
      BackendDesc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      try {
        plan.Set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "plan handle");
        plan.SetDesc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config, "plan engine config");
        plan.Finalize("execution plan");
        int64_t workspace = 0;
        Check(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                       CUDNN_TYPE_INT64, 1, nullptr, &workspace),
              "plan workspace size");
        return BackendPlan(std::move(parts_), std::move(plan), workspace);
      } catch (const CudnnDeclined& d) {
        last = d.what;  // the next configuration may finalize
      }
    }
  }
  throw CudnnDeclined{last + " (configurations: " + counts + ")"};
}

cudnnStatus_t BackendPlan::Execute(cudnnHandle_t h, std::span<const int64_t> uids,
                                   std::span<void* const> pointers, void* workspace) const {
  BackendDesc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.Set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()),
           uids.data(), "variant pack uids");
  pack.Set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<int64_t>(pointers.size()), pointers.data(), "variant pack pointers");
  pack.Set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace,
           "variant pack workspace");
  pack.Finalize("variant pack");
  return cudnnBackendExecute(h, plan_.get(), pack.get());
}

}  // namespace weft::gpu
