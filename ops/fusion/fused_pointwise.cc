// The op `_fused_pointwise`: a fused group (fused_group.h) as one node of a bound graph. Only the
// fusion pass makes such nodes, after the gradient is built: the op has no gradient, parses no
// attributes and never appears in a graph's JSON. Its shapes and dtypes are the group's own.
// Compute: ops/cpu/fused_pointwise.cc (tiles), ops/gpu/fused_pointwise.cc (a generated kernel).
#include <sstream>

#include "core/error.h"
#include "ops/fusion/fused_group.h"
#include "ops/op.h"

namespace weft {

namespace {

const FusedGroup& GroupOf(const Attrs& a) { return *a.Get<FusedParam>().group; }

std::vector<Shape> FusedShapes(const Attrs& a, const std::vector<Shape>& in) {
  const FusedGroup& g = GroupOf(a);
  for (uint32_t i = 0; i < g.num_inputs; ++i) {
    if (in[i] != g.shapes[i]) {
      WEFT_THROW(g.label << ": expected input " << i << " of shape " << g.shapes[i] << ", found "
                         << in[i]);
    }
  }
  std::vector<Shape> out;
  for (uint32_t v : g.outputs) out.push_back(g.shapes[v]);
  return out;
}

std::vector<DType> FusedTypes(const Attrs& a, const std::vector<DType>&) {
  const FusedGroup& g = GroupOf(a);
  std::vector<DType> out;
  for (uint32_t v : g.outputs) out.push_back(g.dtypes[v]);
  return out;
}

const bool defined = [] {
  RegisterOp("_fused_pointwise")
      .Describe(
          "connected pointwise ops run as one (made by the fusion pass when a graph is bound)")
      .PassOnly("the pointwise fusion pass")
      .VariadicInputs([](const Attrs& a) { return static_cast<int>(GroupOf(a).num_inputs); })
      .Outputs([](const Attrs& a) { return static_cast<int>(GroupOf(a).outputs.size()); })
      .InferShape(FusedShapes)
      .InferType(FusedTypes)
      .ValueInputs([](const Attrs& a, int i) {  // not those only casts and reshapes read
        return GroupOf(a).input_kind(static_cast<uint32_t>(i)) != FusedGroup::InputKind::kMeta;
      });
  return true;
}();

}  // namespace
}  // namespace weft
