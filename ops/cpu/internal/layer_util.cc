#include "ops/cpu/internal/layer_util.h"

#include <utility>

namespace weft::cpu {

void RunLayerBackward(const DnnlPrimitive& data_prim, const DnnlPrimitive& weights_prim,
                      const TensorView& dy, const TensorView& x, const TensorView& w, bool bias,
                      const StagedOutputs& staged) {
  const dnnl::memory diff_dst = DnnlMemory(dy);
  if (staged.Needed(0)) {
    ExecutePrimitive(data_prim,
                     {{DNNL_ARG_DIFF_DST, diff_dst},
                      {DNNL_ARG_WEIGHTS, DnnlMemory(w)},
                      {DNNL_ARG_DIFF_SRC, DnnlMemory(staged.Target(0).Reshaped(x.shape()))}},
                     staged.Extra(0));
  }
  if (!NeedsWeightGrads(staged, bias)) return;
  DnnlArgs args = {{DNNL_ARG_SRC, DnnlMemory(x)},
                   {DNNL_ARG_DIFF_DST, diff_dst},
                   {DNNL_ARG_DIFF_WEIGHTS, DnnlMemory(staged.Target(1))}};
  if (bias) args.emplace(DNNL_ARG_DIFF_BIAS, DnnlMemory(staged.Target(2)));
  ExecutePrimitive(weights_prim, std::move(args), staged.Extra(0));
}

}  // namespace weft::cpu
