// Optimizers: update weights from their gradients, in place, by pushing the update ops
// (sgd_update, sgd_mom_update, adam_update, adamw_update) to the engine; Update returns at once. An
// optimizer owns the state of each parameter, keyed by the index the caller gives it: SGD's
// momentum, Adam's moments and step count, created (zero) on the first update of that index with
// the weight's shape, dtype and device.
//
//   SGD sgd(/*lr=*/0.1, /*momentum=*/0.9, /*wd=*/1e-4);
//   for (int i = 0; i < num_params; ++i) sgd.Update(i, weights[i], grads[i]);
//
// Every optimizer first rescales the gradient, clips it to [-clip_gradient, clip_gradient] when
// clip_gradient > 0, and adds weight decay: g = clip(rescale_grad * grad) + wd * weight (AdamW
// decays the weight apart instead). A decay filter says which parameters decay at all (GPT-2
// decays its matrices, not its biases and norms):
//
//   AdamW adamw(/*lr=*/3e-4, 0.9, 0.95, 1e-8, /*wd=*/0.1);
//   adamw.set_decay_filter(DecayMatricesOnly);
// Not thread-safe: one thread calls Update (the ops it pushes run on the engine's workers).
//
// A graph can carry the updates instead (weft::Trainer, weft/trainer.h): ForGraph says which
// update op and attributes to add per parameter, StepLearningRate which rate the t-th update runs
// with; Update pushes the same op with the same numbers, so both ways compute the same.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/shape.h"
#include "ops/attrs.h"
#include "storage/ndarray.h"

namespace weft {

// Whether parameter `name` of `shape` takes weight decay (an imperative Update passes no name: "").
using DecayFilter = std::function<bool(const std::string& name, const Shape& shape)>;
// GPT-2's rule: the parameters of two or more dimensions (weights of matrix products and
// embeddings) decay; biases, norms' scales and shifts (one dimension) do not.
bool DecayMatricesOnly(const std::string& name, const Shape& shape);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Pushes the update of `weight` (written in place) from `grad`, which has the weight's shape.
  // Throws weft::Error when the shapes differ or the index was first used for another shape.
  virtual void Update(int index, const NDArray& weight, const NDArray& grad) = 0;

  // The update op a graph runs per parameter ("sgd_update", "sgd_mom_update", "adam_update") and
  // its attributes but the learning rate, which the graph passes as an input (lr_input).
  struct GraphUpdate {
    std::string op;
    AttrMap attrs;
  };
  virtual GraphUpdate ForGraph() const = 0;
  // ForGraph's update for parameter `name` of `shape`: wd 0 where the decay filter leaves it out.
  GraphUpdate ForParameter(const std::string& name, const Shape& shape) const;
  // The rate the t-th update of a parameter (t >= 1) runs with, for the base rate `lr`: `lr`, or
  // for Adam with the bias correction folded in.
  virtual double StepLearningRate(double lr, int64_t t) const;
  // Every rate the t-th update reads (its lr input with lr_input): StepLearningRate, then for
  // AdamW the decoupled decay's rate, `lr` itself.
  virtual std::vector<double> StepRates(double lr, int64_t t) const;
  // The same settings, without any state.
  virtual std::unique_ptr<Optimizer> Clone() const = 0;

  const char* name() const { return name_; }
  double learning_rate() const { return lr_; }
  void set_learning_rate(double lr);  // for schedules; >= 0
  double rescale_grad() const { return rescale_grad_; }
  void set_decay_filter(DecayFilter filter) { decay_filter_ = std::move(filter); }

 protected:
  Optimizer(const char* name, double lr, double wd, double rescale_grad, double clip_gradient);
  // The attributes every update op takes, but the learning rate.
  AttrMap CommonAttrs() const;
  double wd() const { return wd_; }
  double clip_gradient() const { return clip_gradient_; }
  // The state array `states[index]` for `weight`: created with zeros on first use, then checked
  // to still match the weight's shape and dtype.
  NDArray& State(std::map<int, NDArray>& states, int index, const NDArray& weight) const;
  void CheckArguments(const NDArray& weight, const NDArray& grad) const;
  // `copy` (a Clone) with this optimizer's decay filter.
  std::unique_ptr<Optimizer> WithFilter(std::unique_ptr<Optimizer> copy) const;
  // The update an imperative Update pushes at step t: ForParameter("", weight's shape) with the
  // rates of StepRates as attributes.
  GraphUpdate ImperativeUpdate(const NDArray& weight, int64_t t) const;

 private:
  const char* name_;  // "SGD", "Adam", "AdamW": for messages
  double lr_, wd_, rescale_grad_, clip_gradient_;
  DecayFilter decay_filter_;  // null: every parameter decays
};

// Stochastic gradient descent, with momentum when momentum > 0:
//   mom = momentum * mom - lr * g;  weight += mom      (plain: weight -= lr * g)
class SGD : public Optimizer {
 public:
  explicit SGD(double lr = 0.01, double momentum = 0, double wd = 0, double rescale_grad = 1,
               double clip_gradient = -1);
  void Update(int index, const NDArray& weight, const NDArray& grad) override;
  GraphUpdate ForGraph() const override;
  std::unique_ptr<Optimizer> Clone() const override;

 private:
  double momentum_;
  std::map<int, NDArray> mom_;  // per index, only when momentum_ > 0
};

// Adam (Kingma and Ba), with the bias correction folded into the learning rate as MXNet does:
// at the t-th update of an index, lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t), then
//   mean = beta1 * mean + (1 - beta1) * g;  var = beta2 * var + (1 - beta2) * g^2;
//   weight -= lr_t * mean / (sqrt(var) + epsilon)
class Adam : public Optimizer {
 public:
  explicit Adam(double lr = 0.001, double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-8,
                double wd = 0, double rescale_grad = 1, double clip_gradient = -1);
  void Update(int index, const NDArray& weight, const NDArray& grad) override;
  GraphUpdate ForGraph() const override;
  double StepLearningRate(double lr, int64_t t) const override;
  std::unique_ptr<Optimizer> Clone() const override;

 protected:
  Adam(const char* name, double lr, double beta1, double beta2, double epsilon, double wd,
       double rescale_grad, double clip_gradient);
  AttrMap MomentAttrs() const;  // beta1, beta2, epsilon and CommonAttrs
  double beta1_, beta2_, epsilon_;

 private:
  std::map<int, NDArray> mean_, var_;
  std::map<int, int64_t> steps_;  // t per index: the updates pushed so far
};

// AdamW (Loshchilov and Hutter), as torch.optim.AdamW: the weight decays apart from the gradient,
// then Adam's step on the gradient alone (bias correction folded into its rate as Adam's):
//   weight *= 1 - lr * wd;  mean, var as Adam's with g = clip(rescale_grad * grad);
//   weight -= lr_t * mean / (sqrt(var) + epsilon)
// PyTorch adds epsilon to the corrected sqrt(var) / sqrt(1 - beta2^t) instead: the two differ by
// less than epsilon's share of the step.
class AdamW : public Adam {
 public:
  explicit AdamW(double lr = 0.001, double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-8,
                 double wd = 0.01, double rescale_grad = 1, double clip_gradient = -1);
  GraphUpdate ForGraph() const override;
  std::vector<double> StepRates(double lr, int64_t t) const override;
  std::unique_ptr<Optimizer> Clone() const override;
};

}  // namespace weft
