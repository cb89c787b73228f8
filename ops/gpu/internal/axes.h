// Walks over the elements of up to three arrays at once, as the data-movement and reduction
// kernels take them (GpuAxes, kernels/params.cuh): the host lists the axes of a walk, outermost
// first, with each array's stride along them, and MergeAxes drops the axes of extent 1 and merges
// neighbours that every array runs on across, so that a kernel divides as little as the layout
// allows (a slice of whole rows is one axis, a transpose of two matrices is three).
//
//   // y = transpose(x), x (2, 3): walk y's axes, array 0 is y, array 1 is x.
//   GpuAxes walk = MergeAxes({{3, {2, 1}}, {2, {1, 3}}});
//   Launch(..., x, y, walk, n, req);    // y[off[0]] = x[off[1]] at every position of `walk`
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/shape.h"
#include "ops/gpu/kernels/params.cuh"

namespace weft::gpu {

struct WalkAxis {
  int64_t dim;
  std::array<int64_t, 3> stride;  // of arrays 0, 1, 2, in elements; 0 where an array stays put
};

// The walk as kernels take it. The positions are visited in the same row-major order as before
// merging; at most kGpuMaxDims axes remain (a walk over one array's axes never has more).
GpuAxes MergeAxes(const std::vector<WalkAxis>& axes);

// Row-major strides of `shape`, in elements.
std::array<int64_t, Shape::kMaxDims> RowMajorStrides(const Shape& shape);

}  // namespace weft::gpu
