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

}  // namespace weft
