#include "ops/cpu/internal/layer_util.h"

#include <utility>

namespace weft::cpu {

namespace {

dnnl::algorithm DnnlAlgorithm(ActType act) {
  switch (act) {
    case ActType::kRelu:
      return dnnl::algorithm::eltwise_relu;
    case ActType::kRelu6:
      return dnnl::algorithm::eltwise_clip;  // between alpha 0 and beta 6 (EltwiseBeta)
    case ActType::kSigmoid:
      return dnnl::algorithm::eltwise_logistic;
    case ActType::kTanh:
      return dnnl::algorithm::eltwise_tanh;
    case ActType::kSoftRelu:
      return dnnl::algorithm::eltwise_soft_relu;
    case ActType::kGelu:
      return dnnl::algorithm::eltwise_gelu_erf;
    case ActType::kGeluTanh:
      return dnnl::algorithm::eltwise_gelu_tanh;
  }
  return dnnl::algorithm::undef;
}

// oneDNN's beta for `act`: the upper bound of a clip.
float EltwiseBeta(ActType act) { return act == ActType::kRelu6 ? 6.0f : 0.0f; }

void AppendAct(dnnl::post_ops& ops, std::optional<ActType> act) {
  if (act)
    ops.append_eltwise(/*scale=*/1.0f, DnnlAlgorithm(*act), /*alpha=*/0.0f, EltwiseBeta(*act));
}

}  // namespace

dnnl::primitive_attr LayerAttr(std::optional<ActType> act, bool sum) {
  dnnl::primitive_attr attr = ScratchpadAttr();
  if (!act && !sum) return attr;
  dnnl::post_ops ops;
  if (sum) ops.append_sum(/*scale=*/1.0f);
  AppendAct(ops, act);
  attr.set_post_ops(ops);
  return attr;
}

dnnl::primitive_attr DepthwiseLayerAttr(std::optional<ActType> act, int dw_stride,
                                        std::optional<ActType> dw_act) {
  dnnl::primitive_attr attr = ScratchpadAttr();
  dnnl::post_ops ops;
  AppendAct(ops, act);
  const auto f32 = dnnl::memory::data_type::f32;
  ops.append_dw(f32, f32, f32, /*kernel=*/3, dw_stride, /*padding=*/1, /*mask=*/0, {});
  AppendAct(ops, dw_act);
  attr.set_post_ops(ops);
  return attr;
}

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
