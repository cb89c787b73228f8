// cuDNN's fused attention (flash attention) for Attention's bfloat16 and float16 calls without a
// mask (ops/gpu/attention.cc), through cuDNN's backend graph API: the graph cudnn-frontend builds
// for its "composite" SDPA node (two matmuls around a scale, the causal mask as generated indices
// and a select, and the softmax as max, exp, sum, log and divide), which cuDNN 9's runtime fusion
// engines run as one flash-attention kernel forward and one backward. Written against cuDNN
// 9.19's headers; needs cuDNN 9.0 or later at run time (the GPU machine's system cuDNN is 9.14).
//
// cuDNN's softmax statistics are max + log(sum exp(s - max)) of the scaled, masked scores per
// query, in float32: the natural-log log-sum-exp that weft's lse is, so the op's lse output is
// cuDNN's stats and either path's backward reads either path's lse.
//
// Plans (operation graph, engine configuration, execution plan) are built once per (handle,
// dtype, B, H, Tq, Tk, D, Dv, the strides, scale, causal, direction) and kept for the process, like
// the RNN's (rnn_plan.h): a handle belongs to one thread and stream, and so does its plan. A call
// cuDNN declines (no engine for the graph, a plan that does not finalize, a workspace over the cap)
// returns false having queued nothing, and the decline is remembered for its key, so the op runs
// weft's kernels without asking again.
//
//   if (!CudnnAttentionForward(call, d, dtype, {q, k, v, out, lse})) { ...weft's kernels... }
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/nn/attention.h"

namespace weft::gpu {

// q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv), out and out_grad (B, H, Tq, Dv) of the
// data's dtype, each where its rows of `d` start (d.q, d.k, d.v, d.out: their strides, the last
// axis contiguous; the gradients of q, k and v have theirs), lse (B, H, Tq) float32 contiguous.
struct CudnnAttentionForwardArgs {
  const void *q, *k, *v;
  void* out;
  void* lse;  // null: not wanted (kept in the call's workspace)
};
struct CudnnAttentionBackwardArgs {
  const void *q, *k, *v, *out, *lse, *out_grad;
  void *dq, *dk, *dv;  // each written (cuDNN's outputs overwrite)
};

// Queue the call on `call`'s stream and return true, or return false having queued nothing
// where cuDNN declines it (the first decline of each reason is logged once).
bool CudnnAttentionForward(const GpuCall& call, const AttentionDims& d, DType dtype,
                           const CudnnAttentionForwardArgs& args);
bool CudnnAttentionBackward(const GpuCall& call, const AttentionDims& d, DType dtype,
                            const CudnnAttentionBackwardArgs& args);

// Plans built (and declines found) so far in this process: a call whose key was seen builds none.
struct CudnnAttentionStats {
  int64_t plans_built = 0;
  int64_t declined = 0;
};
CudnnAttentionStats GetCudnnAttentionStats();

}  // namespace weft::gpu
