// AttentionDimsOf (ops/nn/attention.h): the shape rule of Attention and its backward.
#include <cmath>

#include "core/error.h"
#include "ops/nn/attention.h"

namespace weft {
namespace {

void CheckFourAxes(const char* op, const char* name, const char* layout, const Shape& s) {
  if (s.ndim() != 4) {
    WEFT_THROW(op << ": " << name << " must have 4 axes " << layout << ", found " << s);
  }
  if (s.Size() == 0) WEFT_THROW(op << ": " << name << " must be non-empty, found " << s);
}

// The mask's strides over (B, H, Tq, Tk): its axes aligned right, each of extent 1 (broadcast,
// stride 0) or the attention's.
std::array<int64_t, 4> MaskStrides(const char* op, const AttentionDims& d, const Shape& mask) {
  const std::array<int64_t, 4> want = {d.b, d.h, d.tq, d.tk};
  const Shape full{d.b, d.h, d.tq, d.tk};
  if (mask.ndim() < 1 || mask.ndim() > 4) {
    WEFT_THROW(op << ": mask must have 1 to 4 axes broadcasting to " << full << ", found " << mask);
  }
  std::array<int64_t, 4> stride{};
  int64_t step = 1;
  for (int axis = 3, m = mask.ndim() - 1; m >= 0; --axis, --m) {
    if (mask[m] != 1 && mask[m] != want[axis]) {
      WEFT_THROW(op << ": mask " << mask << " does not broadcast to (B, H, Tq, Tk) " << full
                    << ": expected " << want[axis] << " or 1 for its axis " << m << ", found "
                    << mask[m]);
    }
    stride[axis] = mask[m] == 1 ? 0 : step;
    step *= mask[m];
  }
  return stride;
}

}  // namespace

AttentionDims AttentionDimsOf(const char* op, const AttentionParam& p, const Shape& q,
                              const Shape& k, const Shape& v, const Shape* mask) {
  CheckFourAxes(op, "q", "(B, H, Tq, D)", q);
  CheckFourAxes(op, "k", "(B, H, Tk, D)", k);
  CheckFourAxes(op, "v", "(B, H, Tk, Dv)", v);
  if (k[0] != q[0] || k[1] != q[1] || k[3] != q[3]) {
    WEFT_THROW(op << ": k must be (B, H, Tk, D) = (" << q[0] << ", " << q[1] << ", Tk, " << q[3]
                  << ") like q " << q << ", found " << k);
  }
  if (v[0] != q[0] || v[1] != q[1] || v[2] != k[2]) {
    WEFT_THROW(op << ": v must be (B, H, Tk, Dv) = (" << q[0] << ", " << q[1] << ", " << k[2]
                  << ", Dv) like q " << q << " and k " << k << ", found " << v);
  }
  AttentionDims d{q[0], q[1], q[2], k[2], q[3], v[3]};
  d.scale = p.scale ? *p.scale : 1 / std::sqrt(static_cast<double>(d.d));
  d.causal = p.causal;
  d.mask = mask != nullptr;
  if (mask) d.mask_stride = MaskStrides(op, d, *mask);
  return d;
}

}  // namespace weft
