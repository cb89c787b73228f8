#include "ops/nn/window2d.h"

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

}  // namespace

Window2d ParseWindow2d(AttrReader& r, std::optional<Shape> kernel_fallback) {
  Window2d win;
  ReadPair(r, "kernel", kernel_fallback, 1, win.kernel);
  ReadPair(r, "stride", Shape{1, 1}, 1, win.stride);
  ReadPair(r, "pad", Shape{0, 0}, 0, win.pad);
  return win;
}

Geometry2d Geometry2dOf(const char* op, const Window2d& win, const Shape& data) {
  if (data.ndim() != 4) WEFT_THROW(op << ": data must be 4-D (N, C, H, W), found " << data);
  if (data.Size() == 0) WEFT_THROW(op << ": data must not be empty, found " << data);
  Geometry2d g{data[0], data[1], data[2], data[3], 0, 0};
  const int64_t padded[2] = {g.h + 2 * win.pad[0], g.w + 2 * win.pad[1]};
  if (win.kernel[0] > padded[0] || win.kernel[1] > padded[1]) {
    const int64_t input[2] = {g.h, g.w};
    WEFT_THROW(op << ": kernel " << Pair(win.kernel) << " is larger than the padded input "
                  << Pair(padded) << " (input " << Pair(input) << ", pad " << Pair(win.pad) << ")");
  }
  g.oh = (padded[0] - win.kernel[0]) / win.stride[0] + 1;
  g.ow = (padded[1] - win.kernel[1]) / win.stride[1] + 1;
  return g;
}

}  // namespace weft
