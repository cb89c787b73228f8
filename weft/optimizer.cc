#include "weft/optimizer.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "weft/imperative.h"
#include "weft/ops.h"

namespace weft {
namespace {

void CheckRate(const char* optimizer, const char* what, double value) {
  if (!(value >= 0)) WEFT_THROW(optimizer << ": expected " << what << " >= 0, found " << value);
}

}  // namespace

bool DecayMatricesOnly(const std::string&, const Shape& shape) { return shape.ndim() >= 2; }

Optimizer::Optimizer(const char* name, double lr, double wd, double rescale_grad,
                     double clip_gradient)
    : name_(name), lr_(lr), wd_(wd), rescale_grad_(rescale_grad), clip_gradient_(clip_gradient) {
  CheckRate(name, "a learning rate", lr);
  CheckRate(name, "weight decay", wd);
  if (!std::isfinite(rescale_grad))
    WEFT_THROW(name << ": expected a finite rescale_grad, found " << rescale_grad);
}

void Optimizer::set_learning_rate(double lr) {
  CheckRate(name_, "a learning rate", lr);
  lr_ = lr;
}

AttrMap Optimizer::CommonAttrs() const {
  return {{"wd", FloatAttr(wd_)},
          {"rescale_grad", FloatAttr(rescale_grad_)},
          {"clip_gradient", FloatAttr(clip_gradient_)}};
}

double Optimizer::StepLearningRate(double lr, int64_t) const { return lr; }

std::vector<double> Optimizer::StepRates(double lr, int64_t t) const {
  return {StepLearningRate(lr, t)};
}

Optimizer::GraphUpdate Optimizer::ForParameter(const std::string& name, const Shape& shape) const {
  GraphUpdate update = ForGraph();
  if (decay_filter_ && !decay_filter_(name, shape)) update.attrs["wd"] = FloatAttr(0);
  return update;
}

std::unique_ptr<Optimizer> Optimizer::WithFilter(std::unique_ptr<Optimizer> copy) const {
  copy->decay_filter_ = decay_filter_;
  return copy;
}

Optimizer::GraphUpdate Optimizer::ImperativeUpdate(const NDArray& weight, int64_t t) const {
  GraphUpdate update = ForParameter("", weight.shape());
  const std::vector<double> rates = StepRates(learning_rate(), t);
  update.attrs["lr"] = FloatAttr(rates[0]);
  if (rates.size() > 1) update.attrs["decay_rate"] = FloatAttr(rates[1]);
  return update;
}

void Optimizer::CheckArguments(const NDArray& weight, const NDArray& grad) const {
  WEFT_CHECK(!weight.is_none() && !grad.is_none())
      << name_ << ": the weight or its gradient is a null array";
  if (weight.shape() != grad.shape() || weight.dtype() != grad.dtype()) {
    WEFT_THROW(name_ << ": expected a gradient like its weight, " << weight.shape() << " "
                     << weight.dtype() << ", found " << grad.shape() << " " << grad.dtype());
  }
}

NDArray& Optimizer::State(std::map<int, NDArray>& states, int index, const NDArray& weight) const {
  auto [it, created] = states.try_emplace(index);
  if (created) {
    it->second = NDArray(weight.shape(), weight.device(), weight.dtype());
    it->second.Fill(0);
  } else if (it->second.shape() != weight.shape() || it->second.dtype() != weight.dtype()) {
    WEFT_THROW(name_ << ": index " << index << " was first updated with a weight of "
                     << it->second.shape() << " " << it->second.dtype() << ", now "
                     << weight.shape() << " " << weight.dtype()
                     << ": expected one index per parameter");
  }
  return it->second;
}

SGD::SGD(double lr, double momentum, double wd, double rescale_grad, double clip_gradient)
    : Optimizer("SGD", lr, wd, rescale_grad, clip_gradient), momentum_(momentum) {
  CheckRate("SGD", "momentum", momentum);
}

Optimizer::GraphUpdate SGD::ForGraph() const {
  if (momentum_ == 0) return {"sgd_update", CommonAttrs()};
  AttrMap attrs = CommonAttrs();
  attrs["momentum"] = FloatAttr(momentum_);
  return {"sgd_mom_update", attrs};
}

std::unique_ptr<Optimizer> SGD::Clone() const {
  return WithFilter(
      std::make_unique<SGD>(learning_rate(), momentum_, wd(), rescale_grad(), clip_gradient()));
}

void SGD::Update(int index, const NDArray& weight, const NDArray& grad) {
  CheckArguments(weight, grad);
  const AttrMap attrs = ImperativeUpdate(weight, 1).attrs;
  if (momentum_ == 0) {
    op::sgd_update(weight, grad, attrs);
    return;
  }
  op::sgd_mom_update(weight, grad, State(mom_, index, weight), attrs);
}

Adam::Adam(double lr, double beta1, double beta2, double epsilon, double wd, double rescale_grad,
           double clip_gradient)
    : Adam("Adam", lr, beta1, beta2, epsilon, wd, rescale_grad, clip_gradient) {}

Adam::Adam(const char* name, double lr, double beta1, double beta2, double epsilon, double wd,
           double rescale_grad, double clip_gradient)
    : Optimizer(name, lr, wd, rescale_grad, clip_gradient),
      beta1_(beta1),
      beta2_(beta2),
      epsilon_(epsilon) {
  if (!(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1)) {
    WEFT_THROW(name << ": expected beta1 and beta2 in [0, 1), found " << beta1 << " and " << beta2);
  }
  WEFT_CHECK(epsilon > 0) << name << ": expected epsilon > 0, found " << epsilon;
}

AttrMap Adam::MomentAttrs() const {
  AttrMap attrs = CommonAttrs();
  attrs["beta1"] = FloatAttr(beta1_);
  attrs["beta2"] = FloatAttr(beta2_);
  attrs["epsilon"] = FloatAttr(epsilon_);
  return attrs;
}

Optimizer::GraphUpdate Adam::ForGraph() const { return {"adam_update", MomentAttrs()}; }

double Adam::StepLearningRate(double lr, int64_t t) const {
  const double t_double = static_cast<double>(t);
  return lr * std::sqrt(1 - std::pow(beta2_, t_double)) / (1 - std::pow(beta1_, t_double));
}

std::unique_ptr<Optimizer> Adam::Clone() const {
  return WithFilter(std::make_unique<Adam>(learning_rate(), beta1_, beta2_, epsilon_, wd(),
                                           rescale_grad(), clip_gradient()));
}

void Adam::Update(int index, const NDArray& weight, const NDArray& grad) {
  CheckArguments(weight, grad);
  NDArray& mean = State(mean_, index, weight);
  NDArray& var = State(var_, index, weight);
  const int64_t t = steps_[index] + 1;
  const GraphUpdate update = ImperativeUpdate(weight, t);
  Invoke(update.op, {weight, grad, mean, var}, update.attrs, {.outputs = {weight}});
  steps_[index] = t;  // counted once the update is pushed
}

AdamW::AdamW(double lr, double beta1, double beta2, double epsilon, double wd, double rescale_grad,
             double clip_gradient)
    : Adam("AdamW", lr, beta1, beta2, epsilon, wd, rescale_grad, clip_gradient) {}

Optimizer::GraphUpdate AdamW::ForGraph() const { return {"adamw_update", MomentAttrs()}; }

std::vector<double> AdamW::StepRates(double lr, int64_t t) const {
  return {StepLearningRate(lr, t), lr};
}

std::unique_ptr<Optimizer> AdamW::Clone() const {
  return WithFilter(std::make_unique<AdamW>(learning_rate(), beta1_, beta2_, epsilon_, wd(),
                                            rescale_grad(), clip_gradient()));
}

}  // namespace weft
