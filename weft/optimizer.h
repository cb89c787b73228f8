// Optimizers: update weights from their gradients, in place, by pushing the update ops
// (sgd_update, sgd_mom_update, adam_update) to the engine; Update returns at once. An optimizer
// owns the state of each parameter, keyed by the index the caller gives it: SGD's momentum, Adam's
// moments and step count, created (zero) on the first update of that index with the weight's
// shape, dtype and device.
//
//   SGD sgd(/*lr=*/0.1, /*momentum=*/0.9, /*wd=*/1e-4);
//   for (int i = 0; i < num_params; ++i) sgd.Update(i, weights[i], grads[i]);
//
// Every optimizer first rescales the gradient, clips it to [-clip_gradient, clip_gradient] when
// clip_gradient > 0, and adds weight decay: g = clip(rescale_grad * grad) + wd * weight.
// Not thread-safe: one thread calls Update (the ops it pushes run on the engine's workers).
//
// A graph can carry the updates instead (weft::Trainer, weft/trainer.h): ForGraph says which
// update op and attributes to add per parameter, StepLearningRate which rate the t-th update runs
// with; Update pushes the same op with the same numbers, so both ways compute the same.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "ops/attrs.h"
#include "storage/ndarray.h"

namespace weft {

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
  // The rate the t-th update of a parameter (t >= 1) runs with, for the base rate `lr`: `lr`, or
  // for Adam with the bias correction folded in.
  virtual double StepLearningRate(double lr, int64_t t) const;
  // The same settings, without any state.
  virtual std::unique_ptr<Optimizer> Clone() const = 0;

  const char* name() const { return name_; }
  double learning_rate() const { return lr_; }
  void set_learning_rate(double lr);  // for schedules; >= 0
  double rescale_grad() const { return rescale_grad_; }

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

 private:
  const char* name_;  // "SGD", "Adam": for messages
  double lr_, wd_, rescale_grad_, clip_gradient_;
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

 private:
  double beta1_, beta2_, epsilon_;
  std::map<int, NDArray> mean_, var_;
  std::map<int, int64_t> steps_;  // t per index: the updates pushed so far
};

}  // namespace weft
