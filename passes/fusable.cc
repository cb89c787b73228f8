#include "passes/fusable.h"

#include "ops/fusion/fused_group.h"

namespace weft {

namespace {

// The dtypes a fused kernel computes in: the floating types the functors of ops/math are
// instantiated for (float16 is not one of them).
bool FusedKernelDType(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || Is16BitFloat(t);
}

}  // namespace

bool IsDataInput(PointwiseKind kind, size_t pos) {
  return ReadsAsData(kind, static_cast<int>(pos));
}

int64_t FusableSize(const Graph& g, uint32_t n) {
  const Node& node = g.node(n);
  if (node.is_variable()) return -1;
  const Op& op = *node.op;
  const PointwiseKind kind = op.pointwise.kind;
  if (kind == PointwiseKind::kNone || kind == PointwiseKind::kUpdate) return -1;
  if (op.HasEffects()) return -1;
  const int64_t size = g.shapes()[g.EntryId({n, 0})].Size();
  for (uint32_t o = 0; o < g.num_outputs(n); ++o) {
    const uint32_t e = g.EntryId({n, o});
    if (g.shapes()[e].Size() != size || !FusedKernelDType(g.dtypes()[e])) return -1;
  }
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (!IsDataInput(kind, i)) continue;
    const uint32_t e = g.EntryId(node.inputs[i]);
    if (!FusedKernelDType(g.dtypes()[e])) return -1;
    const int64_t in = g.shapes()[e].Size();
    if (in != size && !(kind == PointwiseKind::kBinary && in < size)) return -1;
  }
  return size > 0 ? size : -1;
}

}  // namespace weft
