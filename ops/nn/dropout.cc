// Dropout: in training, zeroes each element with probability p and scales the rest by 1/(1-p);
// outside training, the identity.
//
// Attribute p, default 0.5, in [0, 1). One visible output, the result, as in MXNet and PyTorch:
// `Symbol::Op("Dropout", {x})` is the dropped-out data. A second output, the op's own (as the
// RNN's reserve is), keeps the mask for the backward: of the same shape, 0 or 1/(1-p) (all 1
// outside training), so that output = data * mask and the gradient is out_grad * mask (the `mul`
// op: exact, and no second draw). Invoke, which gives every output, returns it second.
//
// Random numbers: element i is kept when the i-th uniform number of the range the op reserved
// at push time is >= p, on every device, so a seed gives the same mask whatever the device, the
// number of engine workers or intra-op threads. Compute: ops/cpu/dropout.cc, ops/gpu/dropout.cc.
#include <span>

#include "core/error.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft {
namespace {

DropoutParam ParseDropout(AttrReader& r) {
  const double p = r.Float("p", 0.5);
  if (!(p >= 0 && p < 1)) {
    WEFT_THROW("op 'Dropout': attribute 'p': expected a probability in [0, 1), found " << p);
  }
  return {p};
}

const bool defined = [] {
  WEFT_REGISTER_OP(Dropout)
      .Describe(
          "in training, zeroes each element with probability p (default 0.5) and scales the rest "
          "by 1/(1-p); else the identity. One visible output; the mask (0 or 1/(1-p)) is kept for "
          "the backward")
      .Params(ParseDropout)
      .Inputs({"data"})
      .Outputs(2)
      .VisibleOutputs([](const Attrs&) { return 1; })
      .InferShape([](const Attrs&, const std::vector<Shape>& in) {
        return std::vector<Shape>{in[0], in[0]};
      })
      .Inplace({{0, 0}})
      .Random([](const Attrs& a, std::span<const TensorView> in, bool train) -> uint64_t {
        return train && a.Get<DropoutParam>().p > 0 ? in[0].size()
                                                    : 0;  // one number per element, as computed
      })
      .Gradient([](const Attrs&, GradBuilder& g) {
        g.SetInputGrad(0, g.Op("mul", {g.OutGrad(0), g.Output(1)}));
      });
  return true;
}();

}  // namespace
}  // namespace weft
