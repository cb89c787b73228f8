// cuDNN's backend (graph) API in the pieces weft builds graphs from: 4-D tensors, matmul,
// pointwise, reduction and reshape operations, an operation graph finalized into an execution
// plan by heuristics mode A, and running that plan on a variant pack. Used by
// cudnn_attention.cc. Compiled only by --config=cuda.
//
//   BackendGraph g;
//   const auto q = g.Tensor({kQ, CUDNN_DATA_BFLOAT16, dims, strides});
//   const auto s = g.Virtual(CUDNN_DATA_FLOAT, score_dims, score_strides);
//   g.Matmul(q, kt, s);
//   ...
//   BackendPlan plan = std::move(g).Build(handle);   // throws CudnnDeclined where cuDNN declines
//   WEFT_CUDNN_CHECK(plan.Execute(handle, uids, pointers, workspace));
//
// Building reports a failure as CudnnDeclined (an unsupported graph is a status the caller acts
// on: it runs another path), never as weft::Error; running a built plan fails as weft::Error.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

namespace weft::gpu {

// A backend call that failed while a graph or plan was built: which, and cuDNN's status.
struct CudnnDeclined {
  std::string what;
};

// Move-only owner of one backend descriptor.
class BackendDesc {
 public:
  explicit BackendDesc(cudnnBackendDescriptorType_t type);
  ~BackendDesc();
  BackendDesc(BackendDesc&& other) noexcept : desc_(other.desc_) { other.desc_ = nullptr; }
  BackendDesc& operator=(BackendDesc&&) = delete;
  BackendDesc(const BackendDesc&) = delete;
  BackendDesc& operator=(const BackendDesc&) = delete;
  cudnnBackendDescriptor_t get() const { return desc_; }
  // Sets `count` values of `type` (throws CudnnDeclined naming `name`).
  void Set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const void* values, const char* what);
  void SetDesc(cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value, const char* what);
  void Finalize(const char* what);

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

using Dims4 = std::array<int64_t, 4>;

// A tensor of the graph: its unique id (what the variant pack names), type, extents and element
// strides. Virtual tensors live inside the fused kernels only; by-value ones are host scalars.
struct TensorSpec {
  int64_t uid;
  cudnnDataType_t type;
  Dims4 dims, strides;
  bool is_virtual = false;
  bool by_value = false;
};

// A built plan and what running it needs. Keeps every descriptor it was built from.
class BackendPlan {
 public:
  BackendPlan(std::deque<BackendDesc> parts, BackendDesc plan, int64_t workspace)
      : parts_(std::move(parts)), plan_(std::move(plan)), workspace_(workspace) {}
  int64_t workspace() const { return workspace_; }  // bytes
  // Runs the plan on h's stream with tensors uids[i] at pointers[i] (device memory, or host
  // scalars for by-value tensors).
  cudnnStatus_t Execute(cudnnHandle_t h, std::span<const int64_t> uids,
                        std::span<void* const> pointers, void* workspace) const;

 private:
  std::deque<BackendDesc> parts_;
  BackendDesc plan_;
  int64_t workspace_;
};

// An operation graph being built; each call adds one tensor or operation.
class BackendGraph {
 public:
  cudnnBackendDescriptor_t Tensor(const TensorSpec& spec);
  // A virtual tensor with a fresh uid (from 1000 up).
  cudnnBackendDescriptor_t Virtual(cudnnDataType_t type, const Dims4& dims, const Dims4& strides);
  // A by-value float scalar (dims 1, 1, 1, 1).
  cudnnBackendDescriptor_t Scalar(int64_t uid);

  void Matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c);
  // y = mode(x[, b[, t]]), computing in `compute`; `axis` for CUDNN_POINTWISE_GEN_INDEX.
  void Pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
                 cudnnBackendDescriptor_t b = nullptr, cudnnBackendDescriptor_t t = nullptr,
                 cudnnDataType_t compute = CUDNN_DATA_FLOAT, int64_t axis = -1);
  // y = op over the axes where y's extent is 1 and x's is not.
  void Reduction(cudnnReduceTensorOp_t op, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y);
  void Reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y);

  // Finalizes the operation graph for handle h and returns the plan of the first engine
  // configuration that finalizes, of heuristics mode A, then of the fallback list; throws
  // CudnnDeclined when none does.
  BackendPlan Build(cudnnHandle_t h) &&;

 private:
  std::vector<cudnnBackendDescriptor_t> Configs(const BackendDesc& graph,
                                                cudnnBackendHeurMode_t mode);
  BackendDesc& Add(cudnnBackendDescriptorType_t type);
  cudnnBackendDescriptor_t AddOperation(BackendDesc& op, const char* what);

  std::deque<BackendDesc> parts_;  // tensors and operations, alive as long as the plan
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_uid_ = 1000;
};

// Row-major strides of `dims`.
Dims4 DenseStrides(const Dims4& dims);

}  // namespace weft::gpu
