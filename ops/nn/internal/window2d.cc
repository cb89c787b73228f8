#include "ops/nn/window2d.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace weft {

namespace {

// Two extents, each at least `min`; names the op and the attribute otherwise.
void ReadPair(AttrReader& r, const char* name, std::optional<Shape> fallback, int64_t min,
              int64_t (&out)[2]) {
  const Shape s = r.ShapeAttr(name, fallback);
  if (s.ndim() != 2 || s[0] < min || s[1] < min) {
    WEFT_THROW("op '" << r.op() << "': attribute '" << name << "': expected two extents >= " << min
                      << " such as (3, 3), found " << s);
  }
  out[0] = s[0];
  out[1] = s[1];
}

Shape Pair(const int64_t (&v)[2]) { return Shape{v[0], v[1]}; }

bool Dilated(const Window2d& win) { return win.dilate[0] != 1 || win.dilate[1] != 1; }

}  // namespace

Window2d ParseWindow2d(AttrReader& r, std::optional<Shape> kernel_fallback) {
  Window2d win;
  ReadPair(r, "kernel", kernel_fallback, 1, win.kernel);
  ReadPair(r, "stride", Shape{1, 1}, 1, win.stride);
  ReadPair(r, "pad", Shape{0, 0}, 0, win.pad);
  return win;
}

void ParseDilate(AttrReader& r, Window2d& win) {
  ReadPair(r, "dilate", Shape{1, 1}, 1, win.dilate);
}

void ParseLayout(AttrReader& r, Window2d& win) {
  enum Layout { kNchw, kNhwc, kNchw16c };
  const Layout layout =
      r.Choice<Layout>("layout", {{"NCHW", kNchw}, {"NHWC", kNhwc}, {"NCHW16c", kNchw16c}}, kNchw);
  win.channels_last = layout == kNhwc;
  win.blocked = layout == kNchw16c;
}

int64_t OutputExtent(const Window2d& win, int axis, int64_t size) {
  const int64_t stride = win.stride[axis];
  const int64_t room = size + 2 * win.pad[axis] - win.Span(axis);  // >= 0 once checked
  if (!win.ceil) return room / stride + 1;
  int64_t out = (room + stride - 1) / stride + 1;
  if ((out - 1) * stride >= size + win.pad[axis]) --out;  // it would start in the right padding
  return out;
}

Geometry2d Geometry2dOf(const char* op, const Window2d& win, const Shape& data) {
  const char* layout = win.channels_last ? "(N, H, W, C) (layout NHWC)" : "(N, C, H, W)";
  if (data.ndim() != 4) WEFT_THROW(op << ": data must be 4-D " << layout << ", found " << data);
  if (data.Size() == 0) WEFT_THROW(op << ": data must not be empty, found " << data);
  Geometry2d g = win.channels_last ? Geometry2d{data[0], data[3], data[1], data[2], 0, 0, true}
                                   : Geometry2d{data[0], data[1], data[2], data[3], 0, 0, false};
  g.blocked = win.blocked;
  const int64_t padded[2] = {g.h + 2 * win.pad[0], g.w + 2 * win.pad[1]};
  const int64_t span[2] = {win.Span(0), win.Span(1)};
  if (span[0] > padded[0] || span[1] > padded[1]) {
    const int64_t input[2] = {g.h, g.w};
    std::ostringstream kernel;
    kernel << "kernel " << Pair(win.kernel);
    if (Dilated(win)) {
      kernel << " with dilate " << Pair(win.dilate) << " spans " << Pair(span) << ", which";
    }
    WEFT_THROW(op << ": " << kernel.str() << " is larger than the padded input " << Pair(padded)
                  << " (input " << Pair(input) << ", pad " << Pair(win.pad) << ")");
  }
  g.oh = OutputExtent(win, 0, g.h);
  g.ow = OutputExtent(win, 1, g.w);
  return g;
}

int64_t PadAfter(const Window2d& win, const Geometry2d& g, int axis) {
  const int64_t size = axis == 0 ? g.h : g.w, out = axis == 0 ? g.oh : g.ow;
  const int64_t reach = (out - 1) * win.stride[axis] + win.Span(axis);  // of the padded input
  return std::max(win.pad[axis], reach - size - win.pad[axis]);
}

}  // namespace weft
