#include "passes/internal/moves.h"

#include <string>

#include "ops/op.h"

namespace weft {

bool IsReshape(const Node& n) {
  if (n.op == nullptr) return false;
  const std::string& op = n.op->name;
  return op == "reshape" || op == "reshape_dims" || op == "expand_dims" || op == "flatten" ||
         op == "reshape_like";
}

bool IsMove(const Node& n) {
  return n.op != nullptr && (IsReshape(n) || n.op->name == "transpose" || n.op->name == "slice");
}

Runs Normalized(const Runs& runs) {
  Runs out;
  for (const Run& r : runs) {
    if (r.extent == 1) continue;
    if (!out.empty() && out.back().stride == r.extent * r.stride) {
      out.back() = {out.back().extent * r.extent, r.stride};
      continue;
    }
    out.push_back(r);
  }
  return out;
}

std::optional<std::vector<Runs>> Regrouped(Runs walk, const Shape& to) {
  std::vector<Runs> axes(to.ndim());
  for (int k = to.ndim() - 1; k >= 0; --k) {
    for (int64_t need = to[k]; need > 1;) {
      if (walk.empty()) return std::nullopt;
      Run& r = walk.back();
      if (r.extent <= need && need % r.extent == 0) {
        axes[k].insert(axes[k].begin(), r);
        need /= r.extent;
        walk.pop_back();
      } else if (r.extent % need == 0) {
        axes[k].insert(axes[k].begin(), {need, r.stride});
        r = {r.extent / need, r.stride * need};
        need = 1;
      } else {
        return std::nullopt;
      }
    }
  }
  if (!walk.empty()) return std::nullopt;
  return axes;
}

}  // namespace weft
