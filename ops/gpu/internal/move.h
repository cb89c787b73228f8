// Strided copies on the GPU (transpose, slice, concat and their gradients): one call moves the
// elements of a walk (internal/axes.h) from one array to another, as a cudaMemcpy2DAsync where
// the walk is whole rows written, else with kernels/move.cuh's StridedCopy. Never synchronizes.
//
//   // y (2, 3) = columns 1..3 of x (2, 5): array 0 is y, array 1 is x.
//   StridedMoveGpu(ctx, "float", 4, x + 1, y, MergeAxes({{2, {3, 5, 0}}, {3, {1, 1, 0}}}), 6, req);
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "ops/gpu/kernels/params.cuh"
#include "ops/op.h"

namespace weft::gpu {

// y[off0] = x[off1] at each of the n positions of `walk`, as `req` says. `t`: the kernels' name
// of the dtype (KernelType), of `element_size` bytes; x and y point at the first element concerned.
void StridedMoveGpu(const OpContext& ctx, const std::string& t, size_t element_size, const void* x,
                    void* y, const GpuAxes& walk, int64_t n, OpReq req);

// y (read in row-major order) = x[offset + sum_k i_k stride[k]] at every position i of the walk
// `walk` (of y's size; the elements of x counted in row-major order), as `req` says: the tiled
// kernel where the walk's innermost axis is not x's, else StridedMoveGpu. `op` names the call in
// a dtype error (any dtype of kFillTypes; an add: kElementwiseTypes).
void StridedViewGpu(const OpContext& ctx, const char* op, const TensorView& x,
                    std::span<const int64_t> walk, std::span<const int64_t> stride, int64_t offset,
                    OpReq req, const TensorView& y);

// y = x with its axes permuted (y's axis k is x's axis perm[k]), as `req` says: a tiled kernel
// where the innermost axis changes (kernels/move.cuh), else a strided copy. Any dtype of
// kFillTypes (an add: kElementwiseTypes); another is a weft::Error naming "transpose".
void TransposeGpu(const OpContext& ctx, const TensorView& x, std::span<const int64_t> perm,
                  OpReq req, const TensorView& y);

// `p` advanced by `elements` elements of `element_size` bytes.
inline void* ElementAt(void* p, int64_t elements, size_t element_size) {
  return static_cast<char*>(p) + elements * static_cast<int64_t>(element_size);
}

}  // namespace weft::gpu
