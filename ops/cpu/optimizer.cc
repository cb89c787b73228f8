// CPU compute of the optimizer updates of ops/optimizer/update_ops.h (sgd_update, sgd_mom_update,
// adam_update): loops over the functors of ops/math/optimizer.h. The state arrays advance
// whatever the weight's request (kNull included), as on the GPU.
#include <array>

#include "ops/cpu/internal/cpu_util.h"
#include "ops/op.h"
#include "ops/optimizer/update_ops.h"

namespace weft::cpu {
namespace {

// y[i] = F::Step(w[i], g[i], state) for i in [b, e), as `req` says; the states are updated in
// place. y may be w.
template <typename F, typename T>
void UpdateRange(const UpdateParam& p, OpReq req, const T* w, const T* g,
                 std::array<T*, fn::kMaxUpdateStates> state, T* y, int64_t b, int64_t e) {
  auto step = [=, &p](int64_t i) {
    T s[fn::kMaxUpdateStates];
    for (int k = 0; k < F::kStates; ++k) s[k] = state[k][i];
    const T out = F::Step(p, w[i], g[i], s);
    for (int k = 0; k < F::kStates; ++k) state[k][i] = s[k];
    return out;
  };
  if (req == OpReq::kNull) {
    for (int64_t i = b; i < e; ++i) step(i);
    return;
  }
  StoreRange(y, req, b, e, step);
}

// in: (weight, grad, F::kStates states), one shape, then with lr_input the F::kRates rates
// (float64: lr, then decay_rate); out: the weight's shape (usually the weight).
template <typename F>
void Update(const char* op, const Attrs& a, std::span<const TensorView> in, OpReq req,
            const TensorView& y) {
  static_assert(F::kStates <= fn::kMaxUpdateStates);
  UpdateParam p = a.Get<UpdateParam>();
  if (p.lr_input) fn::ReadRates<F>(in.back().data<double>(), p);
  WEFT_FLOAT_SWITCH(in[0].dtype(), T, op, {
    const T *w = in[0].data<T>(), *g = in[1].data<T>();
    std::array<T*, fn::kMaxUpdateStates> state{};
    for (int k = 0; k < F::kStates; ++k) state[k] = in[2 + k].data<T>();
    T* out = y.data<T>();
    ParallelFor(y.size(), 4096,
                [&](int64_t b, int64_t e) { UpdateRange<F>(p, req, w, g, state, out, b, e); });
  });
}

std::vector<NamedDeviceImpl> UpdateImpls() {
  std::vector<NamedDeviceImpl> table;
#define WEFT_UPDATE_CPU(name, functor, description)                                     \
  table.push_back(                                                                      \
      {#name,                                                                           \
       {.compute = [](const OpContext&, const Attrs& a, std::span<const TensorView> in, \
                      std::span<const OpReq> req, std::span<const TensorView> out) {    \
         Update<fn::functor>(#name, a, in, req[0], out[0]);                             \
       }}});
  WEFT_UPDATE_OPS(WEFT_UPDATE_CPU)
#undef WEFT_UPDATE_CPU
  return table;
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, UpdateImpls());

}  // namespace
}  // namespace weft::cpu
