// CPU compute of SoftmaxCrossEntropy and its backward op (ops/nn/softmax_cross_entropy.cc defines
// them and says what they compute). A label that is not an integer in [0, C) is a weft::Error
// raised while the op runs, so it surfaces at the output's WaitToRead. Both dtypes run the loops
// below (oneDNN has no fused op for this); each row's max is subtracted before exp.
#include <algorithm>
#include <cmath>

#include "ops/cpu/internal/cpu_util.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

// Throws, naming the op, the row and the value, at the first label that is not a class index.
template <typename T>
void CheckLabels(const std::string& op, const T* label, int64_t n, int64_t classes) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = label[i];
    if (!(v >= 0 && v < static_cast<T>(classes) && v == std::floor(v))) {
      WEFT_THROW(op << ": label of row " << i << " is " << v << ", expected a class index in [0, "
                    << classes << ")");
    }
  }
}

// x (N, C), label (N,) -> loss (N,), lse (N,).
template <typename T>
void SceForwardLoops(int64_t n, int64_t c, const T* x, const T* label, T* loss, T* lse) {
  ParallelFor(n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* row = x + i * c;
      lse[i] = LogSumExp(row, c, 1);
      loss[i] = lse[i] - row[static_cast<int64_t>(label[i])];
    }
  });
}

// dy (N,), x (N, C), label (N,), lse (N,) -> dx (N, C).
template <typename T>
void SceBackwardLoops(int64_t n, int64_t c, const T* dy, const T* x, const T* label, const T* lse,
                      T* dx) {
  ParallelFor(n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* row = x + i * c;
      const int64_t target = static_cast<int64_t>(label[i]);
      for (int64_t k = 0; k < c; ++k)
        dx[i * c + k] = dy[i] * (std::exp(row[k] - lse[i]) - (k == target ? T(1) : T(0)));
    }
  });
}

// Forward, in: (data, label), out: (loss, lse); backward, in: (out_grad, data, label, lse), out:
// (d_data).
template <bool kBackward>
void SceCompute(const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                std::span<const OpReq> req, std::span<const TensorView> out) {
  const std::string op = kBackward ? "_backward_SoftmaxCrossEntropy" : "SoftmaxCrossEntropy";
  const TensorView &data = in[kBackward ? 1 : 0], &label = in[kBackward ? 2 : 1];
  const int64_t n = data.shape()[0], c = data.shape()[1];  // (N, C), as shape inference checked
  WEFT_FLOAT_SWITCH(data.dtype(), T, op, {
    CheckLabels(op, label.data<T>(), n, c);
    if (std::all_of(req.begin(), req.end(), [](OpReq r) { return r == OpReq::kNull; })) return;
    StagedOutputs staged(ctx, req, out, false);
    T* target = staged.Target(0).data<T>();
    if (kBackward) {
      SceBackwardLoops(n, c, in[0].data<T>(), data.data<T>(), label.data<T>(), in[3].data<T>(),
                       target);
    } else {
      SceForwardLoops(n, c, data.data<T>(), label.data<T>(), target, staged.Target(1).data<T>());
    }
    staged.Finish();
  });
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu,
                           {
                               {"SoftmaxCrossEntropy", {.compute = SceCompute<false>}},
                               {"_backward_SoftmaxCrossEntropy", {.compute = SceCompute<true>}},
                           });

}  // namespace
}  // namespace weft::cpu
