// multi_sum_sq: the sums of squares of num_args arrays of any shapes at once, out[i] =
// sum(in[i]^2), as (num_args,) in the inputs' dtype (every input has one dtype: float32, float64 or
// bfloat16; bfloat16 sums accumulate in float32). What gradient clipping by global norm reads
// (weft/gradient_multiplier.h): one op and, on the GPU, a few launches for every parameter of a
// model, where a square and a sum per parameter took two launches each (MXNet's multi_sum_sq,
// PyTorch's foreach norm). The order of the additions depends only on the shapes: the same bits at
// every run. No gradient. Compute: ops/cpu/multi_sum_sq.cc, ops/gpu/multi_sum_sq.cc.
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/elementwise/binary_ops.h"
#include "ops/op.h"

namespace weft {
namespace {

AddNParam ParseMultiSumSq(AttrReader& r) { return {r.Int("num_args", std::nullopt, 1)}; }

std::vector<Shape> MultiSumSqShape(const Attrs& a, const std::vector<Shape>&) {
  return {Shape{a.Get<AddNParam>().num_args}};
}

std::vector<DType> MultiSumSqTypes(const Attrs&, const std::vector<DType>& in) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != DType::kFloat32 && in[i] != DType::kFloat64 && !Is16BitFloat(in[i])) {
      WEFT_THROW("multi_sum_sq: expected float32, float64, bfloat16 or float16 arrays, found "
                 << in[i] << " for input " << i);
    }
    if (in[i] != in[0]) {
      WEFT_THROW("multi_sum_sq: expected every input to be " << in[0] << " like input 0, found "
                                                             << in[i] << " for input " << i);
    }
  }
  return {in[0]};
}

const bool defined = [] {
  RegisterOp("multi_sum_sq")
      .Describe("the sums of squares of num_args arrays of one dtype, as (num_args,)")
      .Params(ParseMultiSumSq)
      .VariadicInputs([](const Attrs& a) { return a.Get<AddNParam>().num_args; })
      .InferShape(MultiSumSqShape)
      .InferType(MultiSumSqTypes);
  return true;
}();

}  // namespace
}  // namespace weft
