// The GPU RNN's plans (ops/gpu/rnn.cc runs them): per call shape (and handle: a handle is used by
// one thread at a time, so is its plan), built once and kept for the process: the RNN descriptor
// (AlgoFor's algorithm, double bias, linear input, padded I/O so that padded positions of out and
// d_data are zero), the data descriptors (without lengths), the sizes of weight space, workspace
// and reserve, and where each of weft's parameter tensors (PyTorch's flat layout) sits in cuDNN's
// weight space, as copy runs (cudnnGetRNNWeightParams). When those runs are one copy of the whole
// vector, the flat vector is the weight space (zero copy); otherwise the op copies it into the
// call's workspace on its stream. Also the dropout descriptors and a handle for size queries.
//
// Algorithm: cuDNN's persistent small-H kernels where PyTorch uses them and reduced precision is
// allowed (AlgoFor in rnn_plan.cc: small state sizes, no sequence lengths, bfloat16 or TF32), the
// standard one otherwise. Compiled only by --config=cuda.
//
//   const RnnPlan& plan = call.Cudnn([&](cudnnHandle_t h) -> const RnnPlan& {
//     return PlanOf(h, p, d, dtype, StreamDropout(h, call.stream().handle(), p.p, seed));
//   });
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "engine/gpu/stream_join.h"
#include "ops/gpu/internal/cudnn_desc.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/nn/rnn_params.h"

namespace weft::gpu {

// The dtypes the GPU RNN computes.
inline constexpr DType kRnnTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16,
                                      DType::kFloat16};

using RnnDesc =
    CudnnDescriptor<cudnnRNNDescriptor_t, cudnnCreateRNNDescriptor, cudnnDestroyRNNDescriptor>;
using DataDesc = CudnnDescriptor<cudnnRNNDataDescriptor_t, cudnnCreateRNNDataDescriptor,
                                 cudnnDestroyRNNDataDescriptor>;

// One copy between weft's flat vector and cuDNN's weight space, in elements.
struct CopyRun {
  int64_t flat, space, count;
};

// A call shape's descriptors and sizes; immutable once built.
struct RnnPlan {
  RnnDesc rnn;
  DataDesc x, y;  // all lengths T (the lengths path builds its own per call)
  TensorDesc h;   // (L*D, N, H)
  size_t weight_bytes = 0, work_bytes = 0, reserve_bytes = 0;
  std::vector<CopyRun> runs;
  bool zero_copy = false;
  cudnnRNNAlgo_t algo = CUDNN_RNN_ALGO_STANDARD;
  // Each cuDNN call's graph (the join: engine/gpu/stream_join.h); mutable as the plan's thread
  // alone uses them (the file comment).
  mutable JoinedLibraryWork forward, backward_data, backward_weights;
};

// Sets an RNN data descriptor of (T, N, vector) with these lengths (one per sequence).
void SetData(cudnnRNNDataDescriptor_t desc, DType dtype, const RnnDims& d, int64_t vector,
             const std::vector<int32_t>& lengths);

// The plan of this handle and call shape, built on first use; plans live for the process.
const RnnPlan& PlanOf(cudnnHandle_t h, const RnnParam& p, const RnnDims& d, DType dtype,
                      cudnnDropoutDescriptor_t dropout);

// A dropout descriptor of probability p with no random state: enough for sizes.
cudnnDropoutDescriptor_t StatelessDropout(cudnnHandle_t h, double p);

// The dropout descriptor of probability p for calls on `stream` with handle `h` (lent by
// GpuCall::Cudnn for that stream): one random state per stream, initialized on its first call
// from that call's seed.
cudnnDropoutDescriptor_t StreamDropout(cudnnHandle_t h, cudaStream_t stream, double p,
                                       uint64_t seed);

// A handle of the current device for size queries (shape inference runs outside any stream).
cudnnHandle_t QueryHandle();

}  // namespace weft::gpu
