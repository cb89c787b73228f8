// AttentionDimsOf and AttentionSlotsOf (ops/nn/attention.h): the shape rule of Attention and its
// backward, and where their tensors sit.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

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

// Rows of a contiguous (B, H, T, D) array.
AttentionRows BhtdRows(int64_t h, int64_t t, int64_t d) { return {0, h * t * d, t * d, d}; }

// The extents and rows of q, k, v (B, H, T, D) each.
AttentionDims BhtdDims(const char* op, const Shape& q, const Shape& k, const Shape& v) {
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
  d.q = BhtdRows(d.h, d.tq, d.d);
  d.k = BhtdRows(d.h, d.tk, d.d);
  d.v = BhtdRows(d.h, d.tk, d.dv);
  d.out = BhtdRows(d.h, d.tq, d.dv);
  return d;
}

// The extents and rows of qkv (B, T, 3, H, D): q, k and v are its parts 0, 1 and 2, read in place;
// out is (B, T, H, D).
AttentionDims PackedDims(const char* op, const Shape& qkv) {
  if (qkv.ndim() != 5 || qkv[2] != 3) {
    WEFT_THROW(op << ": with layout 'bt3hd', qkv must have 5 axes (B, T, 3, H, D), found " << qkv);
  }
  if (qkv.Size() == 0) WEFT_THROW(op << ": qkv must be non-empty, found " << qkv);
  const int64_t b = qkv[0], t = qkv[1], h = qkv[3], d = qkv[4];
  AttentionDims dims{b, h, t, t, d, d};
  const int64_t row = 3 * h * d;  // from one position t to the next, in each part
  dims.q = {0, t * row, d, row};
  dims.k = {h * d, t * row, d, row};
  dims.v = {2 * h * d, t * row, d, row};
  dims.out = {0, t * h * d, d, h * d};
  return dims;
}

// Rows of `r` for (b, h, t) positions of `d` elements each, inside `within` (of `name`).
void CheckRowsInside(const char* op, const char* name, const AttentionRows& r,
                     std::array<int64_t, 4> extents, const Shape& within) {
  int64_t last = r.offset + extents[3] - 1;  // the last element read or written
  bool bad = r.offset < 0;
  for (int i = 0; i < 3; ++i) {
    const int64_t stride = i == 0 ? r.b : i == 1 ? r.h : r.t;
    int64_t reach = 0;
    bad |= stride < 0 || __builtin_mul_overflow(extents[i] - 1, stride, &reach) ||
           __builtin_add_overflow(last, reach, &last);
  }
  if (bad || last >= within.Size()) {
    WEFT_THROW(op << ": with layout 'rows', " << name << "'s rows (offset " << r.offset
                  << ", strides " << r.b << ", " << r.h << ", " << r.t << " over " << extents[0]
                  << " x " << extents[1] << " x " << extents[2] << " rows of " << extents[3]
                  << ") must lie inside " << name << " " << within << " (" << within.Size()
                  << " elements)");
  }
}

// Whether rows `r` of (b, h, t) positions of `d` elements cover [0, size) once each: sorted by
// stride, each axis steps over exactly the axes inside it.
bool CoversOnce(const AttentionRows& r, std::array<int64_t, 4> extents, int64_t size) {
  std::vector<std::pair<int64_t, int64_t>> axes = {{1, extents[3]}};  // (stride, extent)
  const int64_t strides[3] = {r.b, r.h, r.t};
  for (int i = 0; i < 3; ++i) {
    if (extents[i] > 1) axes.push_back({strides[i], extents[i]});
  }
  std::sort(axes.begin(), axes.end());
  int64_t step = 1;
  for (const auto& [stride, extent] : axes) {
    if (stride != step) return false;
    step *= extent;
  }
  return r.offset == 0 && step == size;
}

// The extents and rows of layout kRows: as the attributes say, inside q, k, v and out's shape.
AttentionDims RowsDims(const char* op, const AttentionParam& p, const Shape& q, const Shape& k,
                       const Shape& v) {
  const auto [b, h, tq, tk, d, dv] = p.dims;
  if (b < 1 || h < 1 || tq < 1 || tk < 1 || d < 1 || dv < 1) {
    WEFT_THROW(op << ": with layout 'rows', dims must be (B, H, Tq, Tk, D, Dv), each at least 1, "
                  << "found " << Shape(p.dims));
  }
  AttentionDims dims{b, h, tq, tk, d, dv};
  dims.q = p.rows[0];
  dims.k = p.rows[1];
  dims.v = p.rows[2];
  dims.out = p.rows[3];
  CheckRowsInside(op, "q", dims.q, {b, h, tq, d}, q);
  CheckRowsInside(op, "k", dims.k, {b, h, tk, d}, k);
  CheckRowsInside(op, "v", dims.v, {b, h, tk, dv}, v);
  const Shape out(p.out_shape);
  if (!CoversOnce(dims.out, {b, h, tq, dv}, out.Size())) {
    WEFT_THROW(op << ": with layout 'rows', out's rows (offset " << dims.out.offset << ", strides "
                  << dims.out.b << ", " << dims.out.h << ", " << dims.out.t
                  << ") must cover out_shape " << out << " once, as rows of " << dv);
  }
  return dims;
}

// The attributes' part of `d`, and the mask's strides.
AttentionDims WithAttributes(const char* op, const AttentionParam& p, const Shape* mask,
                             AttentionDims d) {
  d.scale = p.scale ? *p.scale : 1 / std::sqrt(static_cast<double>(d.d));
  d.causal = p.causal;
  d.mask = mask != nullptr;
  if (mask) d.mask_stride = MaskStrides(op, d, *mask);
  return d;
}

}  // namespace

AttentionSlots AttentionSlotsOf(const AttentionParam& p) {
  AttentionSlots s{p.layout == AttentionLayout::kBt3hd ? 1 : 3};
  s.inputs = s.operands;
  if (p.use_mask) s.mask = s.inputs++;
  s.outputs = 2;
  if (p.p > 0) s.rng = s.outputs++;
  return s;
}

AttentionDims AttentionDimsOf(const char* op, const AttentionParam& p, const Shape& q,
                              const Shape& k, const Shape& v, const Shape* mask) {
  return WithAttributes(op, p, mask, BhtdDims(op, q, k, v));
}

AttentionDims AttentionDimsOf(const char* op, const AttentionParam& p,
                              std::span<const Shape> inputs) {
  const AttentionSlots s = AttentionSlotsOf(p);
  const Shape* mask = p.use_mask ? &inputs[s.mask] : nullptr;
  if (p.layout == AttentionLayout::kBhtd)
    return AttentionDimsOf(op, p, inputs[0], inputs[1], inputs[2], mask);
  if (p.layout == AttentionLayout::kRows)
    return WithAttributes(op, p, mask, RowsDims(op, p, inputs[0], inputs[1], inputs[2]));
  return WithAttributes(op, p, mask, PackedDims(op, inputs[0]));
}

}  // namespace weft
