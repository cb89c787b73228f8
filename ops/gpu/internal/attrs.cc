#include "ops/gpu/internal/attrs.h"

#include <optional>

namespace weft::gpu {

double DropoutPAttr(const Attrs& attrs) {
  AttrReader r("Dropout", attrs.raw());
  return r.Float("p", 0.5);
}

}  // namespace weft::gpu
