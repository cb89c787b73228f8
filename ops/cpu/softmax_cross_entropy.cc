// CPU compute of SoftmaxCrossEntropy and its backward op (ops/nn/softmax_cross_entropy.cc defines
// them and says what they compute). A label that is not an integer in [0, C) is a weft::Error
// raised while the op runs, so it surfaces at the output's WaitToRead. float32, float64 and
// bfloat16 logits (computed in float, the loss and lse in float) run the loops below (oneDNN has
// no fused op for this); each row's max is subtracted before exp.
#include <algorithm>
#include <cmath>

#include "ops/cpu/internal/cpu_util.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

// Throws, naming the op, the row and the value, at the first label that is not a class index.
template <typename L>
void CheckLabels(const std::string& op, const L* label, int64_t n, int64_t classes) {
  for (int64_t i = 0; i < n; ++i) {
    const auto v = ToArith(label[i]);
    if (!(v >= 0 && v < static_cast<decltype(v)>(classes) && v == std::floor(v))) {
      WEFT_THROW(op << ": label of row " << i << " is " << v << ", expected a class index in [0, "
                    << classes << ")");
    }
  }
}

// x (N, C), label (N,) -> loss (N,), lse (N,), in the statistics' type ArithOf<T>.
template <typename T, typename L>
void SceForwardLoops(int64_t n, int64_t c, const T* x, const L* label, ArithOf<T>* loss,
                     ArithOf<T>* lse) {
  ParallelFor(n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* row = x + i * c;
      lse[i] = LogSumExp(row, c, 1);
      loss[i] = lse[i] - ToArith(row[static_cast<int64_t>(ToArith(label[i]))]);
    }
  });
}

// dy (N,), x (N, C), label (N,), lse (N,) -> dx (N, C); dy and lse in ArithOf<T>.
template <typename T, typename L>
void SceBackwardLoops(int64_t n, int64_t c, const ArithOf<T>* dy, const T* x, const L* label,
                      const ArithOf<T>* lse, T* dx) {
  using A = ArithOf<T>;
  ParallelFor(n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* row = x + i * c;
      const int64_t target = static_cast<int64_t>(ToArith(label[i]));
      for (int64_t k = 0; k < c; ++k) {
        dx[i * c + k] = FromArith<T>(
            dy[i] * (std::exp(ToArith(row[k]) - lse[i]) - (k == target ? A(1) : A(0))));
      }
    }
  });
}

// One direction with data of T and labels of L.
template <bool kBackward, typename T, typename L>
void SceRun(const OpContext& ctx, const std::string& op, std::span<const TensorView> in,
            std::span<const OpReq> req, std::span<const TensorView> out) {
  using A = ArithOf<T>;
  const TensorView &data = in[kBackward ? 1 : 0], &label = in[kBackward ? 2 : 1];
  const int64_t n = data.shape()[0], c = data.shape()[1];  // (N, C), as shape inference checked
  CheckLabels(op, label.data<L>(), n, c);
  if (std::all_of(req.begin(), req.end(), [](OpReq r) { return r == OpReq::kNull; })) return;
  StagedOutputs staged(ctx, req, out, false);
  if (kBackward) {
    SceBackwardLoops(n, c, in[0].data<A>(), data.data<T>(), label.data<L>(), in[3].data<A>(),
                     staged.Target(0).data<T>());
  } else {
    SceForwardLoops(n, c, data.data<T>(), label.data<L>(), staged.Target(0).data<A>(),
                    staged.Target(1).data<A>());
  }
  staged.Finish();
}

// Forward, in: (data, label), out: (loss, lse); backward, in: (out_grad, data, label, lse), out:
// (d_data). Labels in the data's dtype or float32 (shape inference checked).
template <bool kBackward>
void SceCompute(const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                std::span<const OpReq> req, std::span<const TensorView> out) {
  const std::string op = kBackward ? "_backward_SoftmaxCrossEntropy" : "SoftmaxCrossEntropy";
  const TensorView &data = in[kBackward ? 1 : 0], &label = in[kBackward ? 2 : 1];
  WEFT_WITH_BF16(WEFT_FLOAT_SWITCH, data.dtype(), T, op, {
    if (label.dtype() == data.dtype()) {
      SceRun<kBackward, T, T>(ctx, op, in, req, out);
    } else {
      SceRun<kBackward, T, float>(ctx, op, in, req, out);
    }
  });
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu,
                           {
                               {"SoftmaxCrossEntropy", {.compute = SceCompute<false>}},
                               {"_backward_SoftmaxCrossEntropy", {.compute = SceCompute<true>}},
                           });

}  // namespace
}  // namespace weft::cpu
