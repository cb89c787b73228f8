// Optimizer updates as ops that write the weights in place (call them with the weight array as
// their output): sgd_update, sgd_mom_update, adam_update. Each rescales the gradient, clips it to
// [-clip_gradient, clip_gradient] when clip_gradient > 0, and adds weight decay wd * weight:
//   g = clip(rescale_grad * grad) + wd * weight
// State arrays (momentum, Adam's moments) are inputs the op updates (MutateInputs). As in MXNet,
// adam_update has no bias correction: the Adam optimizer folds it into lr.
#include <cmath>

#include "ops/internal/cpu_util.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

struct UpdateParam {
  double lr, momentum, beta1, beta2, epsilon, wd, rescale_grad, clip_gradient;
};

UpdateParam ParseCommon(AttrReader& r, UpdateParam p) {
  p.lr = r.Float("lr", std::nullopt);
  p.wd = r.Float("wd", 0.0);
  p.rescale_grad = r.Float("rescale_grad", 1.0);
  p.clip_gradient = r.Float("clip_gradient", -1.0);
  if (p.lr < 0) WEFT_THROW(r.op() << ": attribute 'lr': expected a learning rate >= 0, found " << p.lr);
  if (p.wd < 0) WEFT_THROW(r.op() << ": attribute 'wd': expected weight decay >= 0, found " << p.wd);
  return p;
}
UpdateParam ParseSgd(AttrReader& r) { return ParseCommon(r, {}); }
UpdateParam ParseSgdMom(AttrReader& r) {
  UpdateParam p = ParseCommon(r, {});
  p.momentum = r.Float("momentum", 0.0);
  return p;
}
UpdateParam ParseAdam(AttrReader& r) {
  UpdateParam p = ParseCommon(r, {});
  p.beta1 = r.Float("beta1", 0.9);
  p.beta2 = r.Float("beta2", 0.999);
  p.epsilon = r.Float("epsilon", 1e-8);
  if (p.beta1 < 0 || p.beta1 >= 1 || p.beta2 < 0 || p.beta2 >= 1) {
    WEFT_THROW(r.op() << ": expected beta1 and beta2 in [0, 1), found " << p.beta1 << " and " << p.beta2);
  }
  return p;
}

template <typename T>
T Gradient(const UpdateParam& p, T grad, T weight) {
  T g = static_cast<T>(p.rescale_grad) * grad;
  if (p.clip_gradient > 0) {
    const T c = static_cast<T>(p.clip_gradient);
    g = g > c ? c : (g < -c ? -c : g);
  }
  return g + static_cast<T>(p.wd) * weight;
}

// Every input has the weight's shape; the output is the (updated) weight.
std::vector<Shape> UpdateShape(const Attrs&, const std::vector<Shape>& in) {
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i] != in[0]) {
      WEFT_THROW("expected every input to have the weight's shape " << in[0] << ", found " << in[i] << " for input "
                                                                      << i);
    }
  }
  return {in[0]};
}

void SgdCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                std::span<const TensorView> out) {
  const UpdateParam& p = a.Get<UpdateParam>();
  WEFT_FLOAT_SWITCH(in[0].dtype(), T, "sgd_update", {
    const T *w = in[0].data<T>(), *g = in[1].data<T>();
    T* y = out[0].data<T>();
    ParallelFor(in[0].size(), 4096, [&](int64_t b, int64_t e) {
      StoreRange(y, req[0], b, e, [&](int64_t i) { return w[i] - static_cast<T>(p.lr) * Gradient(p, g[i], w[i]); });
    });
  });
}

void SgdMomCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                   std::span<const TensorView> out) {
  const UpdateParam& p = a.Get<UpdateParam>();
  WEFT_FLOAT_SWITCH(in[0].dtype(), T, "sgd_mom_update", {
    const T *w = in[0].data<T>(), *g = in[1].data<T>();
    T* mom = in[2].data<T>();
    T* y = out[0].data<T>();
    ParallelFor(in[0].size(), 4096, [&](int64_t b, int64_t e) {
      StoreRange(y, req[0], b, e, [&](int64_t i) {
        mom[i] = static_cast<T>(p.momentum) * mom[i] - static_cast<T>(p.lr) * Gradient(p, g[i], w[i]);
        return w[i] + mom[i];
      });
    });
  });
}

void AdamCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                 std::span<const TensorView> out) {
  const UpdateParam& p = a.Get<UpdateParam>();
  WEFT_FLOAT_SWITCH(in[0].dtype(), T, "adam_update", {
    const T *w = in[0].data<T>(), *g = in[1].data<T>();
    T *m = in[2].data<T>(), *v = in[3].data<T>();
    T* y = out[0].data<T>();
    const T b1 = static_cast<T>(p.beta1), b2 = static_cast<T>(p.beta2);
    ParallelFor(in[0].size(), 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const T grad = Gradient(p, g[i], w[i]);
        m[i] = b1 * m[i] + (1 - b1) * grad;
        v[i] = b2 * v[i] + (1 - b2) * grad * grad;
        Store(y[i], req[0], w[i] - static_cast<T>(p.lr) * m[i] / (std::sqrt(v[i]) + static_cast<T>(p.epsilon)));
      }
    });
  });
}

const bool registered = [] {
  WEFT_REGISTER_OP(sgd_update)
      .Describe("weight - lr * g; call with the weight as output to update it in place")
      .Params(ParseSgd)
      .Inputs({"weight", "grad"})
      .InferShape(UpdateShape)
      .Inplace({{0, 0}})
      .Compute(DeviceType::kCpu, SgdCompute);
  WEFT_REGISTER_OP(sgd_mom_update)
      .Describe("mom = momentum * mom - lr * g; weight += mom (updates mom in place)")
      .Params(ParseSgdMom)
      .Inputs({"weight", "grad", "mom"})
      .InferShape(UpdateShape)
      .Inplace({{0, 0}})
      .MutateInputs({2})
      .Compute(DeviceType::kCpu, SgdMomCompute);
  WEFT_REGISTER_OP(adam_update)
      .Describe("Adam without bias correction: m, v updated in place; weight -= lr * m / (sqrt(v) + epsilon)")
      .Params(ParseAdam)
      .Inputs({"weight", "grad", "mean", "var"})
      .InferShape(UpdateShape)
      .Inplace({{0, 0}})
      .MutateInputs({2, 3})
      .Compute(DeviceType::kCpu, AdamCompute);
  return true;
}();

}  // namespace
}  // namespace weft::cpu
