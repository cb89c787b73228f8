// The gradient through a layer's activation epilogue (layer_op.h).
#include "ops/nn/internal/layer_op.h"

#include <vector>

namespace weft {

GradEntry GradBeforeActivation(const std::string& op, const Attrs& a, ActType act, int num_inputs,
                               GradBuilder& g) {
  std::vector<GradEntry> in = {g.OutGrad(0)};
  switch (ActivationGradReads(act)) {
    case fn::GradReads::kInput: {
      AttrMap without = a.raw();
      without["act_type"] = "none";
      std::vector<GradEntry> layer_in;
      for (int i = 0; i < num_inputs; ++i) layer_in.push_back(g.Input(i));
      in.push_back(g.Op(op, layer_in, without));
      break;
    }
    case fn::GradReads::kOutput:
      in.push_back(g.Output(0));
      break;
    case fn::GradReads::kNothing:
      break;
  }
  return g.Op("_backward_Activation", in, {{"act_type", ActivationName(act)}});
}

}  // namespace weft
