// GPU compute of concat, slice and split (ops/tensor/concat_slice.cc) and of their backward ops, on
// float32, float64, bfloat16, int32, int64 and uint8. Every piece is one strided move
// (internal/move.h): concat, split and their gradients one per part, slice and its gradient one for
// the box (after zeroing the gradient outside it, unless adding to it).
#include <string>
#include <vector>

#include "ops/gpu/internal/axes.h"
#include "ops/gpu/internal/launch.h"
#include "ops/gpu/internal/move.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft::gpu {
namespace {

// ---- concat ----

// The concat axis of `shape` (attribute dim, as checked by shape inference).
int ConcatAxis(const Attrs& attrs, const Shape& shape) {
  return shape.NormalizeAxis(attrs.Get<ConcatParam>().dim);
}

// Input `part` (a block of `len` elements in each of `outer` rows) against the joined array,
// whose rows hold `total` elements: a walk with the joined array's strides as array `joined`
// and the part's as the other of arrays 0 and 1.
GpuAxes PartWalk(int64_t outer, int64_t len, int64_t total, int joined) {
  WalkAxis rows{outer, {len, len, 0}}, cols{len, {1, 1, 0}};
  rows.stride[joined] = total;
  return MergeAxes({rows, cols});
}

// Calls f(i, offset of part i in a joined row, its length per row, the joined row length, rows).
template <typename F>
void ForEachPart(std::span<const TensorView> parts, int axis, F&& f) {
  int64_t outer = 1, total = 0;
  for (int a = 0; a < axis; ++a) outer *= parts[0].shape()[a];
  std::vector<int64_t> len;
  for (const TensorView& p : parts) {
    len.push_back(outer == 0 ? 0 : p.size() / outer);
    total += len.back();
  }
  int64_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    f(i, offset, len[i], total, outer);
    offset += len[i];
  }
}

// in: num_args arrays that agree but on `dim`; out: them side by side along `dim`.
void ConcatCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                   std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const std::string t = KernelType("concat", kFillTypes, in, out);
  const size_t size = DTypeSize(out[0].dtype());
  ForEachPart(in, ConcatAxis(a, in[0].shape()),
              [&](size_t i, int64_t offset, int64_t len, int64_t total, int64_t outer) {
                StridedMoveGpu(ctx, t, size, in[i].raw(), ElementAt(out[0].raw(), offset, size),
                               PartWalk(outer, len, total, 0), in[i].size(), req[0]);
              });
}

// in: (out_grad, arg0, ..., arg{n-1}), the args read for their shapes; out: n gradients.
void ConcatBackwardCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                           std::span<const OpReq> req, std::span<const TensorView> out) {
  const std::string t = KernelType("_backward_concat", kFillTypes, in.first(1), out);
  const size_t size = DTypeSize(in[0].dtype());
  ForEachPart(out, ConcatAxis(a, out[0].shape()),
              [&](size_t i, int64_t offset, int64_t len, int64_t total, int64_t outer) {
                StridedMoveGpu(ctx, t, size, ElementAt(in[0].raw(), offset, size), out[i].raw(),
                               PartWalk(outer, len, total, 1), out[i].size(), req[i]);
              });
}

// ---- split ----

// The split axis of `data` (attribute axis, as checked by shape inference).
int SplitAxis(const Attrs& attrs, const Shape& data) {
  return data.NormalizeAxis(attrs.Get<SplitParam>().axis);
}

// data: any shape; out: num_outputs parts along the axis (squeezed or not: only the axes before it
// and each part's size matter).
void SplitCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  const std::string t = KernelType("split", kFillTypes, in, out);
  const size_t size = DTypeSize(in[0].dtype());
  ForEachPart(out, SplitAxis(a, in[0].shape()),
              [&](size_t i, int64_t offset, int64_t len, int64_t total, int64_t outer) {
                StridedMoveGpu(ctx, t, size, ElementAt(in[0].raw(), offset, size), out[i].raw(),
                               PartWalk(outer, len, total, 1), out[i].size(), req[i]);
              });
}

// in: the num_outputs output gradients; out: d data, them joined along the axis.
void SplitBackwardCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                          std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const std::string t = KernelType("_backward_split", kFillTypes, in, out);
  const size_t size = DTypeSize(out[0].dtype());
  ForEachPart(in, SplitAxis(a, out[0].shape()),
              [&](size_t i, int64_t offset, int64_t len, int64_t total, int64_t outer) {
                StridedMoveGpu(ctx, t, size, in[i].raw(), ElementAt(out[0].raw(), offset, size),
                               PartWalk(outer, len, total, 0), in[i].size(), req[0]);
              });
}

// ---- slice ----

// The box of `in` that slice takes, as a walk over its positions with the strides of `in` as
// array `whole` and the box's own row-major ones as the other of arrays 0 and 1, and the offset
// in `in` of its first element.
struct Box {
  GpuAxes walk;
  int64_t first = 0, size = 1;
};

Box MakeBox(const Attrs& attrs, const Shape& in, int whole) {
  const SliceBox slice = MakeSliceBox(attrs.Get<SliceParam>(), in);
  const auto in_strides = RowMajorStrides(in), box_strides = RowMajorStrides(slice.out);
  Box box;
  std::vector<WalkAxis> axes;
  for (int a = 0; a < in.ndim(); ++a) {
    box.first += slice.begin[a] * in_strides[a];
    WalkAxis axis{slice.out[a], {box_strides[a], box_strides[a], 0}};
    axis.stride[whole] = in_strides[a];
    axes.push_back(axis);
  }
  box.walk = MergeAxes(axes);
  box.size = slice.out.Size();
  return box;
}

// data: any shape; out: the box.
void SliceCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const std::string t = KernelType("slice", kFillTypes, in, out);
  const size_t size = DTypeSize(in[0].dtype());
  const Box box = MakeBox(a, in[0].shape(), 1);
  StridedMoveGpu(ctx, t, size, ElementAt(in[0].raw(), box.first, size), out[0].raw(), box.walk,
                 box.size, req[0]);
}

// in: (out_grad: the box, data); out: d data, data's shape: out_grad inside the box, 0 elsewhere.
void SliceBackwardCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                          std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const std::string t = KernelType("_backward_slice", kFillTypes, in.first(1), out);
  const size_t size = DTypeSize(in[0].dtype());
  const OpReq inside = req[0] == OpReq::kAddTo ? OpReq::kAddTo : OpReq::kWrite;
  if (inside == OpReq::kWrite) FillGpu(ctx, 0, OpReq::kWrite, out[0]);
  const Box box = MakeBox(a, in[1].shape(), 0);
  StridedMoveGpu(ctx, t, size, in[0].raw(), ElementAt(out[0].raw(), box.first, size), box.walk,
                 box.size, inside);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {
                               {"concat", {.compute = ConcatCompute}},
                               {"_backward_concat", {.compute = ConcatBackwardCompute}},
                               {"slice", {.compute = SliceCompute}},
                               {"_backward_slice", {.compute = SliceBackwardCompute}},
                               {"split", {.compute = SplitCompute}},
                               {"_backward_split", {.compute = SplitBackwardCompute}},
                           });

}  // namespace
}  // namespace weft::gpu
