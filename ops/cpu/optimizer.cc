// CPU compute of the optimizer updates of ops/optimizer/update_ops.h (sgd_update, sgd_mom_update,
// adam_update, adamw_update) on float32, float64 and bfloat16 (computing in float, as on the GPU):
// loops over the functors of ops/math/optimizer.h, writing a bfloat16 copy of the new weight when
// asked (UpdateParam::copy); and the loss scaler's step (amp_update_scale). The state arrays
// advance whatever the weight's request (kNull included), as on the GPU.
#include <algorithm>
#include <array>

#include "core/bfloat16.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/op.h"
#include "ops/optimizer/update_ops.h"

namespace weft::cpu {
namespace {

// The new weight's bfloat16 copy (UpdateParam::copy); null: not wanted.
struct Copy {
  BFloat16* data = nullptr;
};

// y[i] = F::Step(w[i], g[i], state) for i in [b, e), as `req` says, and its copy; the states are
// updated in place. y may be w.
template <typename F, typename T>
WEFT_CPU_VECTOR_CLONES void UpdateRange(const UpdateParam& p, OpReq req, const T* w, const T* g,
                                        std::array<T*, fn::kMaxUpdateStates> state, T* y, Copy copy,
                                        int64_t b, int64_t e) {
  using A = ArithOf<T>;
  auto step = [=, &p](int64_t i) {
    A s[fn::kMaxUpdateStates];
    for (int k = 0; k < F::kStates; ++k) s[k] = ToArith(state[k][i]);
    const A out = F::Step(p, ToArith(w[i]), ToArith(g[i]), s);
    for (int k = 0; k < F::kStates; ++k) state[k][i] = FromArith<T>(s[k]);
    return out;
  };
  if constexpr (std::is_same_v<T, float>) {
    if (copy.data != nullptr && (req == OpReq::kWrite || req == OpReq::kWriteInplace)) {
      // Vector loops, a block in L1 at a time: the new weights, then their copy (y rounded).
      constexpr int64_t kBlock = 2048;
      for (int64_t s0 = b; s0 < e; s0 += kBlock) {
        const int64_t s1 = std::min(e, s0 + kBlock);
        StoreRange(y, req, s0, s1, step);
        NarrowBf16(y + s0, OpReq::kWrite, copy.data + s0, s1 - s0);
      }
      return;
    }
  }
  if (copy.data != nullptr || !std::is_same_v<A, T>) {
    for (int64_t i = b; i < e; ++i) {
      const A out = step(i);  // reads w[i] before y[i], which may be w[i], is written
      if (req == OpReq::kAddTo) y[i] = FromArith<T>(ToArith(y[i]) + out);
      if (req != OpReq::kNull && req != OpReq::kAddTo) y[i] = FromArith<T>(out);
      if (copy.data != nullptr) copy.data[i] = BFloat16::FromFloat(static_cast<float>(out));
    }
    return;
  }
  if constexpr (std::is_same_v<A, T>) {
    if (req == OpReq::kNull) {
      for (int64_t i = b; i < e; ++i) step(i);
      return;
    }
    StoreRange(y, req, b, e, step);
  }
}

// The copy output of an update, when it has one: bfloat16 on the CPU.
Copy CopyOf(const char* op, std::span<const OpReq> req, std::span<const TensorView> out) {
  if (out.size() < 2 || req[1] == OpReq::kNull) return {};
  if (req[1] == OpReq::kAddTo) WEFT_THROW(op << ": the weight's copy is written, never added to");
  if (out[1].dtype() != DType::kBFloat16) {
    WEFT_THROW(op << ": expected a bfloat16 copy of the weight on the CPU (float16 needs a GPU), "
                     "found "
                  << out[1].dtype());
  }
  return {static_cast<BFloat16*>(out[1].raw())};
}

// in: (weight, grad, F::kStates states), one shape, then with scale_input the gradient's
// multiplier (float32; not finite: the update writes nothing), then with lr_input the F::kRates
// rates (float64: lr, then decay_rate); out: the weight's shape (usually the weight), then the
// copy.
template <typename F>
void Update(const char* op, const Attrs& a, std::span<const TensorView> in,
            std::span<const OpReq> req, std::span<const TensorView> outs) {
  static_assert(F::kStates <= fn::kMaxUpdateStates);
  UpdateParam p = a.Get<UpdateParam>();
  if (p.lr_input) fn::ReadRates<F>(in.back().data<double>(), p);
  if (p.scale_input && !fn::ReadScale(in[2 + F::kStates].template data<float>(), p)) return;
  const TensorView& y = outs[0];
  const Copy copy = CopyOf(op, req, outs);
  WEFT_FLOAT_BF16_SWITCH(in[0].dtype(), T, op, {
    const T *w = in[0].data<T>(), *g = in[1].data<T>();
    std::array<T*, fn::kMaxUpdateStates> state{};
    for (int k = 0; k < F::kStates; ++k) state[k] = in[2 + k].data<T>();
    T* out = y.data<T>();
    ParallelFor(y.size(), 4096, [&](int64_t b, int64_t e) {
      UpdateRange<F>(p, req[0], w, g, state, out, copy, b, e);
    });
  });
}

std::vector<NamedDeviceImpl> UpdateImpls() {
  std::vector<NamedDeviceImpl> table;
#define WEFT_UPDATE_CPU(name, functor, description)                                     \
  table.push_back(                                                                      \
      {#name,                                                                           \
       {.compute = [](const OpContext&, const Attrs& a, std::span<const TensorView> in, \
                      std::span<const OpReq> req, std::span<const TensorView> out) {    \
         Update<fn::functor>(#name, a, in, req, out);                                   \
       }}});
  WEFT_UPDATE_OPS(WEFT_UPDATE_CPU)
#undef WEFT_UPDATE_CPU
  table.push_back({"amp_update_scale",
                   {.compute = [](const OpContext&, const Attrs& a, std::span<const TensorView> in,
                                  std::span<const OpReq> req, std::span<const TensorView> out) {
                     const float m =
                         fn::UpdateLossScale(a.Get<fn::LossScaleParam>(), *in[0].data<float>(),
                                             in[1].data<float>(), in[2].data<float>());
                     if (req[0] != OpReq::kNull) *out[0].data<float>() = m;
                   }}});
  return table;
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, UpdateImpls());

}  // namespace
}  // namespace weft::cpu
