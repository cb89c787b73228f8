// write_at: writes a slab into an array along an axis at an offset read at run time, in place.
// What step-by-step generation needs: the key and value caches of a GPT's step graph
// (examples/common/gpt.h) take one position's keys and values at position t, a graph input, so the
// graph is bound once and not once per position.
//
// Inputs: data, of any shape and dtype; value, with data's shape and dtype but on `axis`, where
// its extent k is at most data's extent n; index, one element stored as float32, float64, int32
// or int64 (a float's fractional part is dropped, as take does). Attribute axis (default 0,
// negative counts from the end). With data viewed as (outer, n, inner) around the axis:
// data[o, index + j, i] = value[o, j, i] for j < k; the rest of data is unchanged. An index
// outside [0, n - k] (or NaN) is found while the op runs: the CPU throws a weft::Error naming it
// and the bound, the GPU reports the same through its device-error flag; nothing is written,
// and the error stays on data too (the engine attaches it to every var the op writes).
//
// data is updated in place (Op::mutate_inputs) and is also the output: a bound graph gives the
// output data's own array, an argument's included (passes/plan_memory.h), so the op's readers
// are ordered after the write by the graph's edges, whatever order the passes leave the nodes in.
// Where the output has memory of its own (an imperative call given another array), it gets a copy
// of the updated data. No gradient: the op updates state, as the optimizer updates do.
// Compute: ops/cpu/write_at.cc, ops/gpu/write_at.cc.
#include "core/error.h"
#include "ops/internal/op_util.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft {
namespace {

WriteAtParam ParseWriteAt(AttrReader& r) { return {r.Int("axis", 0)}; }

// in: (data, value, index) -> data's shape.
std::vector<Shape> WriteAtShape(const Attrs& attrs, const std::vector<Shape>& in) {
  const Shape &data = in[0], &value = in[1];
  const int axis = NormalizeAxis("write_at", attrs.Get<WriteAtParam>().axis, data.ndim(), data);
  bool fits = value.ndim() == data.ndim() && value[axis] <= data[axis];
  for (int d = 0; fits && d < data.ndim(); ++d) fits = d == axis || value[d] == data[d];
  if (!fits) {
    WEFT_THROW("write_at: expected value of data's shape "
               << data << " but on axis " << axis << ", at most " << data[axis] << " there; found "
               << value);
  }
  if (in[2].Size() != 1) WEFT_THROW("write_at: expected one index, found the shape " << in[2]);
  return {data};
}

std::vector<DType> WriteAtType(const Attrs&, const std::vector<DType>& in) {
  if (in[1] != in[0])
    WEFT_THROW("write_at: expected value of data's " << in[0] << ", found " << in[1]);
  const DType t = in[2];
  if (t != DType::kFloat32 && t != DType::kFloat64 && t != DType::kInt32 && t != DType::kInt64)
    WEFT_THROW("write_at: expected an index of float32, float64, int32 or int64, found " << t);
  return {in[0]};
}

const bool defined = [] {
  WEFT_REGISTER_OP(write_at)
      .Describe(
          "data[..., index + j, ...] = value[..., j, ...] along `axis` (default 0), index read at "
          "run time; updates data in place and returns it (a generation step's key-value cache)")
      .Params(ParseWriteAt)
      .Inputs({"data", "value", "index"})
      .InferShape(WriteAtShape)
      .InferType(WriteAtType)
      .Inplace({{0, 0}})
      .MutateInputs({0});
  return true;
}();

}  // namespace
}  // namespace weft
