#include "engine/internal/var.h"

#include "core/error.h"

namespace weft::engine {

void ThrowBadVar(const Var* v, const void* owner, const char* name) {
  const char* op = name ? name : "op";
  if (v == nullptr) WEFT_THROW("op '" << op << "': expected a variable, found null");
  if (v->owner() != owner) {
    WEFT_THROW(
        "op '"
        << op
        << "': expected a variable of the engine it is pushed to, found one of another engine");
  }
  WEFT_THROW("op '" << op
                    << "': expected a live variable, found one that DeleteVariable was pushed on");
}

}  // namespace weft::engine
