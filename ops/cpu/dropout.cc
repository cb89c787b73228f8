// CPU compute of Dropout (ops/nn/dropout.cc defines it and says what it computes). Which thread
// draws a number does not matter: each chunk of four elements starts its own stream at its own
// Philox block, so a seed gives the same mask whatever the number of engine workers or intra-op
// threads.
#include "core/philox.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"
#include "storage/random.h"

namespace weft::cpu {
namespace {

// 32-bit numbers in one Philox block (RandomKey::offset counts blocks).
constexpr int64_t kPerBlock = 4;

// x, y, mask: n elements each. mask[i] = 0 or scale by the i-th number of `key`'s range; y = x *
// mask. bfloat16 computes in float and rounds y and the mask once each, as the GPU kernel does.
template <typename T>
void DropoutTrain(RandomKey key, double p, const T* x, int64_t n, std::span<const OpReq> req, T* y,
                  T* mask) {
  using A = ArithOf<T>;
  const A scale = static_cast<A>(1 / (1 - p));
  const int64_t blocks = (n + kPerBlock - 1) / kPerBlock;
  ParallelFor(blocks, 1024, [&](int64_t b, int64_t e) {
    PhiloxStream stream(RandomKey{key.seed, key.offset + static_cast<uint64_t>(b)});
    for (int64_t i = b * kPerBlock; i < std::min(n, e * kPerBlock); ++i) {
      const A keep = DropoutKeeps(stream.Uniform(), p) ? scale : A(0);
      StoreArith(y[i], req[0], ToArith(x[i]) * keep);  // x is read before y is written
      StoreArith(mask[i], req[1], keep);
    }
  });
}

// data: any shape; out[0] (result) and out[1] (mask): data's shape.
void DropoutCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out) {
  const double p = a.Get<DropoutParam>().p;
  const int64_t n = in[0].size();
  WEFT_FLOAT_BF16_SWITCH(in[0].dtype(), T, "Dropout", {
    const T* x = in[0].data<T>();
    T *y = out[0].data<T>(), *mask = out[1].data<T>();
    if (ctx.is_train && p > 0) {
      DropoutTrain<T>(ctx.random, p, x, n, req, y, mask);
    } else {
      ParallelFor(n, 1 << 16, [&](int64_t b, int64_t e) {
        StoreN(y + b, req[0], x + b, e - b);
        for (int64_t i = b; i < e; ++i) StoreArith(mask[i], req[1], ArithOf<T>(1));
      });
    }
  });
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, {
                                                 {"Dropout", {.compute = DropoutCompute}},
                                             });

}  // namespace
}  // namespace weft::cpu
