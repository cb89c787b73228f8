// The elementwise binary ops of binary_ops.h with numpy-style broadcasting, their backward ops,
// and add_n (the n-ary sum that aggregates gradients): attributes, shapes, gradients and the
// functor each applies. Compute: ops/cpu/binary.cc, ops/gpu/binary.cc; math: ops/math/binary.h.
//
// Broadcasting: shapes are aligned at their last axis; each pair of extents must be equal or one
// of them 1; the output takes the larger. The backward op `_backward_<name>` takes (dy, lhs, rhs)
// and gives (dlhs, drhs), summing over the axes each operand was broadcast along.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "ops/elementwise/binary_ops.h"
#include "ops/internal/op_util.h"
#include "ops/op.h"

namespace weft {
namespace {

Shape BroadcastShape(const Shape& a, const Shape& b) {
  const int n = std::max(a.ndim(), b.ndim());
  Shape out;
  for (int i = 0; i < n; ++i) {
    const int ia = a.ndim() - n + i, ib = b.ndim() - n + i;
    const int64_t ea = ia >= 0 ? a[ia] : 1, eb = ib >= 0 ? b[ib] : 1;
    if (ea != eb && ea != 1 && eb != 1) {
      WEFT_THROW("operands cannot be broadcast together: " << a << " and " << b << " (axis " << i
                                                           << ": " << ea << " vs " << eb << ")");
    }
    out.PushBack(ea == 1 ? eb : ea);
  }
  return out;
}

std::vector<Shape> BinaryShape(const Attrs&, const std::vector<Shape>& in) {
  return {BroadcastShape(in[0], in[1])};
}

std::vector<Shape> BinaryBackwardShape(const Attrs&, const std::vector<Shape>& in) {
  CheckSameShape(in[0], BroadcastShape(in[1], in[2]),
                 "the output gradient and the broadcast operands");
  return {in[1], in[2]};
}

void DefineBinaryPair(const std::string& name, const std::string& description,
                      const std::string& functor) {
  const std::string backward = "_backward_" + name;
  RegisterOp(name)
      .Describe(description + ", with numpy-style broadcasting")
      .Inputs({"lhs", "rhs"})
      .InferShape(BinaryShape)
      .Inplace({{0, 0}, {1, 0}})
      .Pointwise(PointwiseKind::kBinary, functor)
      .Gradient([backward](const Attrs&, GradBuilder& g) {
        GradEntry d = g.Op(backward, {g.OutGrad(0), g.Input(0), g.Input(1)}, {}, 2);
        g.SetInputGrad(0, g.NodeOutput(d, 0));
        g.SetInputGrad(1, g.NodeOutput(d, 1));
      });
  RegisterOp(backward)
      .Describe("gradient of " + name)
      .Inputs({"out_grad", "lhs", "rhs"})
      .Outputs(2)
      .InferShape(BinaryBackwardShape)
      .Pointwise(PointwiseKind::kBinaryBackward, functor);
}

AddNParam ParseAddN(AttrReader& r) { return {r.Int("num_args", std::nullopt, 1)}; }

std::vector<Shape> AddNShape(const Attrs&, const std::vector<Shape>& in) {
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i] != in[0])
      WEFT_THROW("add_n: expected every input to have shape " << in[0] << ", found " << in[i]
                                                              << " for input " << i);
  }
  return {in[0]};
}

const bool defined = [] {
#define WEFT_DEFINE_BINARY(name, functor, description) \
  DefineBinaryPair(#name, description, "weft::fn::" #functor);
  WEFT_BINARY_OPS(WEFT_DEFINE_BINARY)
#undef WEFT_DEFINE_BINARY
  RegisterOp("add_n")
      .Describe("the sum of num_args arrays of one shape (aggregates gradients)")
      .Params(ParseAddN)
      .VariadicInputs([](const Attrs& a) { return a.Get<AddNParam>().num_args; })
      .InferShape(AddNShape)
      .Inplace({{0, 0}})
      .Pointwise(PointwiseKind::kAddN)
      .Gradient([](const Attrs& a, GradBuilder& g) {
        for (int i = 0; i < a.Get<AddNParam>().num_args; ++i) g.SetInputGrad(i, g.OutGrad(0));
      });
  return true;
}();

}  // namespace
}  // namespace weft
