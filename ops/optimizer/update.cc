// The optimizer updates of update_ops.h (sgd_update, sgd_mom_update, adam_update, adamw_update):
// attributes,
// inputs, shapes and the functor each applies. They have no gradient. Compute:
// ops/cpu/optimizer.cc, ops/gpu/optimizer.cc; math: ops/math/optimizer.h.
//
// The rates are attributes (`lr`; AdamW's `decay_rate` too, lr when not given), or, with
// lr_input=true, the last input `lr`: a float64 array of F::kRates elements on the weight's device
// (lr, then decay_rate), which a bound graph (weft::Trainer) rewrites between steps without
// changing its nodes. With scale_input=true an input `scale` before the rates, a float32 array of
// one element, multiplies the gradient (a loss scaler's and the clipping's factor, computed on the
// device); when it is not finite the update writes nothing: weight, state and copy keep their
// values (the step is skipped). With `copy` = bfloat16 or float16, a second output holds the new
// weight in that dtype (a mixed-precision trainer's 16-bit weights, made by the update itself).
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "ops/op.h"
#include "ops/optimizer/update_ops.h"

namespace weft {
namespace {

UpdateParam ParseCommon(AttrReader& r) {
  UpdateParam p{};
  p.lr_input = r.Bool("lr_input", false);
  p.lr = r.Float("lr", p.lr_input ? std::optional<double>(NAN) : std::nullopt);
  if (p.lr_input && !std::isnan(p.lr)) {
    WEFT_THROW(r.op() << ": attribute 'lr': expected none with lr_input=true (the learning rate is "
                         "the last input), "
                      << "found " << p.lr);
  }
  if (p.lr_input) p.lr = 0;  // read from the input by the computes
  p.scale_input = r.Bool("scale_input", false);
  p.wd = r.Float("wd", 0.0);
  p.rescale_grad = r.Float("rescale_grad", 1.0);
  p.clip_gradient = r.Float("clip_gradient", -1.0);
  p.copy = r.Choice<int>("copy",
                         {{"none", -1},
                          {"bfloat16", static_cast<int>(DType::kBFloat16)},
                          {"float16", static_cast<int>(DType::kFloat16)}},
                         -1);
  if (p.lr < 0)
    WEFT_THROW(r.op() << ": attribute 'lr': expected a learning rate >= 0, found " << p.lr);
  if (p.wd < 0)
    WEFT_THROW(r.op() << ": attribute 'wd': expected weight decay >= 0, found " << p.wd);
  return p;
}

// Adam's and AdamW's moments: beta1, beta2, epsilon.
void ParseMoments(AttrReader& r, UpdateParam& p) {
  p.beta1 = r.Float("beta1", 0.9);
  p.beta2 = r.Float("beta2", 0.999);
  p.epsilon = r.Float("epsilon", 1e-8);
  if (p.beta1 < 0 || p.beta1 >= 1 || p.beta2 < 0 || p.beta2 >= 1) {
    WEFT_THROW(r.op() << ": expected beta1 and beta2 in [0, 1), found " << p.beta1 << " and "
                      << p.beta2);
  }
}

// The attributes of update F, and the names of its state inputs (F::kStates of them: the return
// type checks the count).
template <typename F>
UpdateParam Parse(AttrReader& r);
template <typename F>
std::array<const char*, F::kStates> StateInputs();

template <>
UpdateParam Parse<fn::SgdUpdate>(AttrReader& r) {
  return ParseCommon(r);
}
template <>
std::array<const char*, 0> StateInputs<fn::SgdUpdate>() {
  return {};
}

template <>
UpdateParam Parse<fn::SgdMomUpdate>(AttrReader& r) {
  UpdateParam p = ParseCommon(r);
  p.momentum = r.Float("momentum", 0.0);
  return p;
}
template <>
std::array<const char*, 1> StateInputs<fn::SgdMomUpdate>() {
  return {"mom"};
}

template <>
UpdateParam Parse<fn::AdamUpdate>(AttrReader& r) {
  UpdateParam p = ParseCommon(r);
  ParseMoments(r, p);
  return p;
}
template <>
std::array<const char*, 2> StateInputs<fn::AdamUpdate>() {
  return {"mean", "var"};
}

template <>
UpdateParam Parse<fn::AdamWUpdate>(AttrReader& r) {
  UpdateParam p = ParseCommon(r);
  ParseMoments(r, p);
  p.decay_rate = r.Float("decay_rate", p.lr_input ? 0.0 : p.lr);
  if (p.lr_input && p.decay_rate != 0) {
    WEFT_THROW(r.op() << ": attribute 'decay_rate': expected none with lr_input=true (the rates "
                         "are the last input), found "
                      << p.decay_rate);
  }
  if (p.decay_rate < 0) {
    WEFT_THROW(r.op() << ": attribute 'decay_rate': expected a rate >= 0, found " << p.decay_rate);
  }
  return p;
}
template <>
std::array<const char*, 2> StateInputs<fn::AdamWUpdate>() {
  return {"mean", "var"};
}

// The inputs after the tensors of the weight's shape: the gradient's multiplier, then the rates,
// each when its attribute asks for it.
int TrailingInputs(const UpdateParam& p) { return (p.scale_input ? 1 : 0) + (p.lr_input ? 1 : 0); }

// Every input has the weight's shape, but the rates' (`rates` elements); the output is the
// (updated) weight, and its copy.
std::vector<Shape> UpdateShape(int rates, const Attrs& a, const std::vector<Shape>& in) {
  const UpdateParam& p = a.Get<UpdateParam>();
  const bool lr_input = p.lr_input;
  const size_t tensors = in.size() - TrailingInputs(p);
  if (p.scale_input && in[tensors].Size() != 1) {
    WEFT_THROW("expected the gradient's multiplier (input "
               << tensors << ") to have one element, found " << in[tensors]);
  }
  if (lr_input && in.back().Size() != rates) {
    if (rates == 1) {
      WEFT_THROW("expected the learning rate (input " << tensors << ") to have one element, found "
                                                      << in.back());
    }
    WEFT_THROW("expected the rates (input " << tensors << ") to have " << rates
                                            << " elements (lr, decay_rate), found " << in.back());
  }
  for (size_t i = 1; i < tensors; ++i) {
    if (in[i] != in[0]) {
      WEFT_THROW("expected every input to have the weight's shape " << in[0] << ", found " << in[i]
                                                                    << " for input " << i);
    }
  }
  if (a.Get<UpdateParam>().copy >= 0) return {in[0], in[0]};
  return {in[0]};
}

// The weight's dtype for every input but the learning rate, which is float64.
std::vector<DType> UpdateType(const std::string& op, const Attrs& a, const std::vector<DType>& in) {
  const UpdateParam& p = a.Get<UpdateParam>();
  const bool lr_input = p.lr_input;
  const size_t tensors = in.size() - TrailingInputs(p);
  if (p.scale_input && in[tensors] != DType::kFloat32) {
    WEFT_THROW("op '" << op << "': expected the gradient's multiplier (input " << tensors
                      << ") to be " << DType::kFloat32 << ", found " << in[tensors]);
  }
  if (lr_input && in.back() != DType::kFloat64) {
    WEFT_THROW("op '" << op << "': expected the learning rate (input " << tensors << ") to be "
                      << DType::kFloat64 << ", found " << in.back());
  }
  OneInputType(op, in, tensors);
  const int copy = a.Get<UpdateParam>().copy;
  if (copy >= 0) return {in[0], static_cast<DType>(copy)};
  return {in[0]};
}

template <typename F>
void DefineUpdate(const std::string& name, const std::string& description,
                  const std::string& functor) {
  std::vector<std::string> inputs = {"weight", "grad"};
  std::vector<int> states;
  for (const char* state : StateInputs<F>()) {
    states.push_back(static_cast<int>(inputs.size()));
    inputs.push_back(state);
  }
  const int tensors = static_cast<int>(inputs.size());
  RegisterOp(name)
      .Describe(description)
      .Params(Parse<F>)
      .Inputs([inputs](const Attrs& a) {
        std::vector<std::string> names = inputs;
        if (a.Get<UpdateParam>().scale_input) names.push_back("scale");
        if (a.Get<UpdateParam>().lr_input) names.push_back("lr");
        return names;
      })
      .VariadicInputs(
          [tensors](const Attrs& a) { return tensors + TrailingInputs(a.Get<UpdateParam>()); })
      .Outputs([](const Attrs& a) { return a.Get<UpdateParam>().copy >= 0 ? 2 : 1; })
      .InferShape([](const Attrs& a, const std::vector<Shape>& in) {
        return UpdateShape(F::kRates, a, in);
      })
      .InferType(
          [name](const Attrs& a, const std::vector<DType>& in) { return UpdateType(name, a, in); })
      .Inplace({{0, 0}})
      .MutateInputs(states)
      .Pointwise(PointwiseKind::kUpdate, functor);
}

const bool defined = [] {
#define WEFT_DEFINE_UPDATE(name, functor, description) \
  DefineUpdate<fn::functor>(#name, description, "weft::fn::" #functor);
  WEFT_UPDATE_OPS(WEFT_DEFINE_UPDATE)
#undef WEFT_DEFINE_UPDATE
  return true;
}();

}  // namespace
}  // namespace weft
