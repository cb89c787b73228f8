#include "ops/gpu/internal/attrs.h"

#include <optional>

namespace weft::gpu {

// Defaults as in ops/cpu/optimizer.cc (ParseCommon, ParseSgdMom, ParseAdam).
GpuUpdateParams UpdateAttrs(const std::string& op, const Attrs& attrs) {
  AttrReader r(op, attrs.raw());
  GpuUpdateParams p{};
  p.lr = r.Float("lr", std::nullopt);
  p.wd = r.Float("wd", 0.0);
  p.rescale_grad = r.Float("rescale_grad", 1.0);
  p.clip_gradient = r.Float("clip_gradient", -1.0);
  p.momentum = r.Float("momentum", 0.0);
  p.beta1 = r.Float("beta1", 0.9);
  p.beta2 = r.Float("beta2", 0.999);
  p.epsilon = r.Float("epsilon", 1e-8);
  return p;
}

}  // namespace weft::gpu
