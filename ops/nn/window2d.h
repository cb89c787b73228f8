// The geometry of a 2-D window sliding over NCHW data, shared by Convolution and Pooling: the
// kernel/stride/pad attributes, the output extent, and the taps of one window that fall inside
// the input.
//
// Device neutral: the definitions (ops/nn/convolution.cc, pooling.cc) parse and check it, and both
// devices' computes read it.
//
// Convention (MXNet's "valid"): the padded input is (H + 2 * pad_h, W + 2 * pad_w) and the output
// has floor((H + 2 * pad_h - kernel_h) / stride_h) + 1 rows (the same for columns): every window
// lies entirely inside the padded input.
//
//   Window2d win = ParseWindow2d(reader, std::nullopt);          // kernel is required
//   Geometry2d g = Geometry2dOf("Convolution", win, data_shape);  // checks, then extents
//   ForEachTap(win, g, oh, ow, [&](int64_t i, int64_t j, int64_t offset) { ... });
#pragma once

#include <cstdint>
#include <optional>

#include "core/shape.h"
#include "ops/attrs.h"

namespace weft {

struct Window2d {
  int64_t kernel[2];
  int64_t stride[2];
  int64_t pad[2];
};

// Reads "kernel" (required unless `kernel_fallback`), "stride" (default (1, 1)) and "pad"
// (default (0, 0)): two extents each, kernel and stride at least 1.
Window2d ParseWindow2d(AttrReader& r, std::optional<Shape> kernel_fallback);

// Extents of one call: data (n, c, h, w), output (n, *, oh, ow).
struct Geometry2d {
  int64_t n, c, h, w, oh, ow;
};

// Checks that `data` is non-empty NCHW and that the kernel fits in the padded input; the errors
// name `op` and the shapes.
Geometry2d Geometry2dOf(const char* op, const Window2d& win, const Shape& data);

// Calls f(i, j, offset) for each tap (i, j) of the window at output (oh, ow) that falls inside the
// input plane, where offset = row * w + column is the tap's place in an (h, w) plane.
template <typename F>
void ForEachTap(const Window2d& win, const Geometry2d& g, int64_t oh, int64_t ow, F&& f) {
  const int64_t top = oh * win.stride[0] - win.pad[0];
  const int64_t left = ow * win.stride[1] - win.pad[1];
  for (int64_t i = 0; i < win.kernel[0]; ++i) {
    const int64_t row = top + i;
    if (row < 0 || row >= g.h) continue;
    for (int64_t j = 0; j < win.kernel[1]; ++j) {
      const int64_t column = left + j;
      if (column >= 0 && column < g.w) f(i, j, row * g.w + column);
    }
  }
}

}  // namespace weft
