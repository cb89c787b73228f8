// Parsing act_type, for Activation and for the layers' activation epilogues (unary_ops.h).
#include "ops/elementwise/unary_ops.h"

namespace weft {

ActType ReadActType(AttrReader& r, std::optional<ActType> fallback) {
#define WEFT_ACT_CHOICE(value, name, functor) {name, ActType::value},
  return r.Choice<ActType>("act_type", {WEFT_ACTIVATIONS(WEFT_ACT_CHOICE)}, fallback);
#undef WEFT_ACT_CHOICE
}

std::optional<ActType> ReadLayerAct(AttrReader& r) {
  if (r.String("act_type", "none") == "none") return std::nullopt;
  return ReadActType(r, std::nullopt);
}

}  // namespace weft
