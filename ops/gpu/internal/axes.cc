#include "ops/gpu/internal/axes.h"

#include "core/error.h"

namespace weft::gpu {

GpuAxes MergeAxes(const std::vector<WalkAxis>& axes) {
  std::vector<WalkAxis> merged;
  for (const WalkAxis& axis : axes) {
    if (axis.dim == 1) continue;
    bool runs_on = !merged.empty();
    for (int a = 0; a < 3 && runs_on; ++a)
      runs_on = merged.back().stride[a] == axis.stride[a] * axis.dim;
    if (runs_on) {
      merged.back() = WalkAxis{merged.back().dim * axis.dim, axis.stride};
    } else {
      merged.push_back(axis);
    }
  }
  WEFT_CHECK_LE(merged.size(), static_cast<size_t>(kGpuMaxDims)) << "a GPU walk has too many axes";
  GpuAxes g{};
  g.ndim = static_cast<int>(merged.size());
  for (int d = 0; d < g.ndim; ++d) {
    g.dim[d] = merged[d].dim;
    for (int a = 0; a < 3; ++a) g.stride[a][d] = merged[d].stride[a];
  }
  return g;
}

std::array<int64_t, Shape::kMaxDims> RowMajorStrides(const Shape& shape) {
  std::array<int64_t, Shape::kMaxDims> strides{};
  int64_t stride = 1;
  for (int a = shape.ndim() - 1; a >= 0; --a) strides[a] = stride, stride *= shape[a];
  return strides;
}

}  // namespace weft::gpu
