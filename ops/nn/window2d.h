// The geometry of a 2-D window sliding over NCHW (or NHWC) data, shared by Convolution and
// Pooling: the kernel/stride/pad/dilate attributes, the data's layout, the output extent, the
// padding each side needs, and the taps of one window that fall inside the input.
//
// The layout (attribute `layout`, MXNet's name): "NCHW" (the default) or "NHWC", channels last
// (PyTorch's channels_last memory format, TensorFlow's default): data (N, H, W, C), output
// (N, OH, OW, F). Only where the data lies changes; the weight stays (F, C / G, kh, kw).
// "NCHW16c" (CPU only, set by the blocked-layout pass, passes/blocked_layout.h): oneDNN's nChw16c,
// the layout its convolutions compute in: shapes stay (N, C, H, W), and every image of the call
// that BlockedImage accepts lies as (N, C / 16, H, W, 16), its channels in blocks of 16
// innermost; the others (a stem's 3 channels, a global pooling's 1x1 output) stay NCHW.
//
// Device neutral: the definitions (ops/nn/convolution.cc, pooling.cc) parse and check it, and both
// devices' computes read it.
//
// Along each axis the window of output o starts at o * stride - pad (input coordinates) and has
// taps start + t * dilate for t in [0, kernel): it spans e = dilate * (kernel - 1) + 1 positions.
// The output extent (its one definition, OutputExtent) is
//   floor((H + 2 * pad - e) / stride) + 1        MXNet's "valid" (every window inside the padded
//                                                input), PyTorch's default
//   ceil((H + 2 * pad - e) / stride) + 1         ceil mode (Pooling's pooling_convention "full",
//                                                PyTorch's ceil_mode=True), less one where the
//                                                last window would start in the right padding
//                                                (PyTorch's rule: every window starts inside the
//                                                input or the left padding)
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
  int64_t pad[2];              // before the input on each axis, and after it (but see PadAfter)
  int64_t dilate[2] = {1, 1};  // Convolution's `dilate`; 1 for pooling
  bool ceil = false;           // ceil mode (Pooling's pooling_convention "full")
  bool channels_last = false;  // layout "NHWC"
  bool blocked = false;        // layout "NCHW16c"

  // Input positions one window spans along `axis`: dilate * (kernel - 1) + 1.
  int64_t Span(int axis) const { return dilate[axis] * (kernel[axis] - 1) + 1; }
};

// Reads "kernel" (required unless `kernel_fallback`), "stride" (default (1, 1)) and "pad"
// (default (0, 0)): two extents each, kernel and stride at least 1.
Window2d ParseWindow2d(AttrReader& r, std::optional<Shape> kernel_fallback);
// Reads "dilate" (default (1, 1), each at least 1) into `win`.
void ParseDilate(AttrReader& r, Window2d& win);
// Reads "layout" ("NCHW", the default, "NHWC" or "NCHW16c") into `win`.
void ParseLayout(AttrReader& r, Window2d& win);

// Whether a tensor of an op of layout NCHW16c (a window op's, a BatchNorm's) lies blocked: an
// (N, C, H, W) image whose channels are a multiple of 16 and whose plane has more than one
// position (a 1x1 plane is the same bytes either way). The ops and the pass ask this one rule.
inline bool BlockedImage(int64_t channels, int64_t plane) {
  return channels % 16 == 0 && plane > 1;
}
inline bool BlockedImage(const Shape& nchw) {
  return nchw.ndim() == 4 && BlockedImage(nchw[1], nchw[2] * nchw[3]);
}

// Where the values of one image's channel lie in a tensor of any layout: element (n, c, p),
// p = row * w + column a position of the (h, w) plane, is at
// n * image + (c / block) * channel + c % block + p * step: block 1 for NCHW and NHWC, 16 for a
// blocked image (channel then strides over a block of 16 channels' planes).
struct PlaneStrides {
  int64_t image, channel, step, block = 1;
  int64_t At(int64_t n, int64_t c, int64_t p) const {
    return n * image + (c / block) * channel + c % block + p * step;
  }
};

// Extents of one call: data (n, c, h, w), output (n, *, oh, ow), in NCHW's order whatever the
// layout.
struct Geometry2d {
  int64_t n, c, h, w, oh, ow;
  bool channels_last = false;
  bool blocked = false;  // layout NCHW16c: BlockedImage images lie blocked

  // The output's shape with `channels` channels, in the layout.
  Shape Out(int64_t channels) const {
    return channels_last ? Shape{n, oh, ow, channels} : Shape{n, channels, oh, ow};
  }
  PlaneStrides Strides(int64_t channels, int64_t plane) const {
    if (channels_last) return PlaneStrides{plane * channels, 1, channels};
    if (blocked && BlockedImage(channels, plane))
      return PlaneStrides{plane * channels, plane * 16, 16, 16};
    return PlaneStrides{plane * channels, plane, 1};
  }
  PlaneStrides DataStrides() const { return Strides(c, h * w); }
  PlaneStrides OutStrides(int64_t channels) const { return Strides(channels, oh * ow); }
};

// The output extent along `axis` for an input extent `size` (see the top of this file); at least
// 1 once Geometry2dOf has checked the window.
int64_t OutputExtent(const Window2d& win, int axis, int64_t size);

// Checks that `data` is non-empty 4-D (in the window's layout) and that the window's span fits in
// the padded input; the errors name `op` and the shapes.
Geometry2d Geometry2dOf(const char* op, const Window2d& win, const Shape& data);

// The padding after the input along `axis` (0: rows, 1: columns) that makes the output extent
// come out of the floor formula with explicit pads, as libraries take them: pad, or more in ceil
// mode where the last window reaches past the padding.
int64_t PadAfter(const Window2d& win, const Geometry2d& g, int axis);
// Whether a window of the call reaches past the symmetric padding (ceil mode only).
inline bool Overhangs(const Window2d& win, const Geometry2d& g) {
  return PadAfter(win, g, 0) > win.pad[0] || PadAfter(win, g, 1) > win.pad[1];
}

// Calls f(i, j, offset) for each tap (i, j) of the window at output (oh, ow) that falls inside the
// input plane, where offset = row * w + column is the tap's place in an (h, w) plane.
template <typename F>
void ForEachTap(const Window2d& win, const Geometry2d& g, int64_t oh, int64_t ow, F&& f) {
  const int64_t top = oh * win.stride[0] - win.pad[0];
  const int64_t left = ow * win.stride[1] - win.pad[1];
  for (int64_t i = 0; i < win.kernel[0]; ++i) {
    const int64_t row = top + i * win.dilate[0];
    if (row < 0 || row >= g.h) continue;
    for (int64_t j = 0; j < win.kernel[1]; ++j) {
      const int64_t column = left + j * win.dilate[1];
      if (column >= 0 && column < g.w) f(i, j, row * g.w + column);
    }
  }
}

}  // namespace weft
