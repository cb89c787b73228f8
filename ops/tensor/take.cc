// take: gather along an axis, as numpy.take and torch.index_select, and its backward op.
//
// Inputs: a, of any shape and dtype, and indices, of any shape, stored as float32, float64, int32
// or int64 (a float's fractional part is dropped, as Embedding does). Attribute axis (default 0,
// negative counts from the end). The output is a.shape[:axis] + indices.shape + a.shape[axis+1:]:
// out[o, j, i] = a[o, indices[j], i]. An index outside [0, a.shape[axis]) (or NaN) is found while
// the op runs: the CPU throws a weft::Error naming it, its position and the bound; the GPU
// reports the same through its device-error flag (ops/gpu/take.cc).
//
// Gradient: only for a. `_backward_take` takes (out_grad, indices, a), a read for its shape only,
// and gives d a, the scatter-add of out_grad by index (summed in index order on the CPU).
// Compute: ops/cpu/take.cc, ops/gpu/take.cc.
#include "core/error.h"
#include "ops/internal/op_util.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft {
namespace {

TakeParam ParseTake(AttrReader& r) { return {r.Int("axis", 0)}; }

// in: (a, indices).
std::vector<Shape> TakeShape(const Attrs& attrs, const std::vector<Shape>& in) {
  const Shape &a = in[0], &indices = in[1];
  const int axis = NormalizeAxis("take", attrs.Get<TakeParam>().axis, a.ndim(), a);
  if (a.ndim() - 1 + indices.ndim() > Shape::kMaxDims) {
    WEFT_THROW("take: expected at most " << Shape::kMaxDims << " output axes, found "
                                         << a.ndim() - 1 + indices.ndim() << " (a " << a
                                         << ", indices " << indices << ")");
  }
  Shape out;
  for (int d = 0; d < axis; ++d) out.PushBack(a[d]);
  for (int d = 0; d < indices.ndim(); ++d) out.PushBack(indices[d]);
  for (int d = axis + 1; d < a.ndim(); ++d) out.PushBack(a[d]);
  return {out};
}

std::vector<DType> TakeType(const Attrs&, const std::vector<DType>& in) {
  const DType t = in[1];
  if (t != DType::kFloat32 && t != DType::kFloat64 && t != DType::kInt32 && t != DType::kInt64)
    WEFT_THROW("take: expected indices of float32, float64, int32 or int64, found " << t);
  return {in[0]};
}

// in: (out_grad, indices, a).
std::vector<Shape> TakeBackwardShape(const Attrs& attrs, const std::vector<Shape>& in) {
  CheckSameShape(in[0], TakeShape(attrs, {in[2], in[1]})[0], "the output gradient and the output");
  return {in[2]};
}

std::vector<DType> TakeBackwardType(const Attrs&, const std::vector<DType>& in) { return {in[0]}; }

void TakeGradient(const Attrs& attrs, GradBuilder& g) {
  g.SetInputGrad(0, g.Op("_backward_take", {g.OutGrad(0), g.Input(1), g.Input(0)}, attrs.raw()));
}

const bool defined = [] {
  WEFT_REGISTER_OP(take)
      .Describe(
          "a gathered along `axis` (default 0) by indices, as numpy.take and torch.index_select: "
          "output a.shape[:axis] + indices.shape + a.shape[axis+1:]")
      .Params(ParseTake)
      .Inputs({"a", "indices"})
      .InferShape(TakeShape)
      .InferType(TakeType)
      .Gradient(TakeGradient);  // indices get none
  WEFT_REGISTER_OP(_backward_take)
      .Describe(
          "gradient of take for a: takes (out_grad, indices, a), a read for its shape, and "
          "scatter-adds out_grad by index")
      .Params(ParseTake)
      .Inputs({"out_grad", "indices", "a"})
      .InferShape(TakeBackwardShape)
      .InferType(TakeBackwardType);
  return true;
}();

}  // namespace
}  // namespace weft
