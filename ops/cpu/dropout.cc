// Dropout: in training, zeroes each element with probability p and scales the rest by 1/(1-p);
// outside training, the identity.
//
// Attribute p, default 0.5, in [0, 1). Two visible outputs: 0, the result; 1, the mask, of the
// same shape, holding 0 or 1/(1-p) (all 1 outside training), so that output = data * mask and
// the gradient is out_grad * mask (the `mul` op: exact, and no second draw).
//
// Random numbers: element i is kept when the i-th uniform number of the range the op reserved
// at push time is >= p. Which thread draws it does not matter (each chunk of four elements
// starts its own stream at its own Philox block), so a seed gives the same mask whatever the
// number of engine workers or intra-op threads.
#include "ops/internal/cpu_util.h"
#include "ops/op.h"
#include "storage/random.h"

namespace weft::cpu {
namespace {

struct DropoutParam {
  double p;
};

DropoutParam ParseDropout(AttrReader& r) {
  const double p = r.Float("p", 0.5);
  if (!(p >= 0 && p < 1)) {
    WEFT_THROW("op 'Dropout': attribute 'p': expected a probability in [0, 1), found " << p);
  }
  return {p};
}

constexpr int64_t kPerBlock = 4;  // 32-bit numbers in one Philox block (RandomKey::offset counts blocks)

// x, y, mask: n elements each. mask[i] = 0 or scale by the i-th number of `key`'s range; y = x * mask.
template <typename T>
void DropoutTrain(RandomKey key, double p, const T* x, int64_t n, std::span<const OpReq> req, T* y, T* mask) {
  const T scale = static_cast<T>(1 / (1 - p));
  const int64_t blocks = (n + kPerBlock - 1) / kPerBlock;
  ParallelFor(blocks, 1024, [&](int64_t b, int64_t e) {
    PhiloxStream stream(RandomKey{key.seed, key.offset + static_cast<uint64_t>(b)});
    for (int64_t i = b * kPerBlock; i < std::min(n, e * kPerBlock); ++i) {
      const T keep = static_cast<double>(stream.Uniform()) >= p ? scale : T(0);
      Store(y[i], req[0], x[i] * keep);  // x is read before y is written: safe in place
      Store(mask[i], req[1], keep);
    }
  });
}

// data: any shape; out[0] (result) and out[1] (mask): data's shape.
void DropoutCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                    std::span<const TensorView> out) {
  const double p = a.Get<DropoutParam>().p;
  const int64_t n = in[0].size();
  WEFT_FLOAT_SWITCH(in[0].dtype(), T, "Dropout", {
    const T* x = in[0].data<T>();
    T *y = out[0].data<T>(), *mask = out[1].data<T>();
    if (ctx.is_train && p > 0) {
      DropoutTrain<T>(ctx.random, p, x, n, req, y, mask);
    } else {
      ParallelFor(n, 1 << 16, [&](int64_t b, int64_t e) {
        StoreN(y + b, req[0], x + b, e - b);
        for (int64_t i = b; i < e; ++i) Store(mask[i], req[1], T(1));
      });
    }
  });
}

const bool registered = [] {
  WEFT_REGISTER_OP(Dropout)
      .Describe(
          "in training, zeroes each element with probability p (default 0.5) and scales the rest by "
          "1/(1-p); else the identity. Outputs: the result and the mask (0 or 1/(1-p); 1 outside training)")
      .Params(ParseDropout)
      .Inputs({"data"})
      .Outputs(2)
      .InferShape([](const Attrs&, const std::vector<Shape>& in) {
        return std::vector<Shape>{in[0], in[0]};
      })
      .Inplace({{0, 0}})
      .Random([](const Attrs& a, std::span<const TensorView> in, bool train) -> uint64_t {
        return train && a.Get<DropoutParam>().p > 0 ? in[0].size() : 0;  // one number per element, as computed
      })
      .Compute(DeviceType::kCpu, DropoutCompute)
      .Gradient([](const Attrs&, GradBuilder& g) {
        g.SetInputGrad(0, g.Op("mul", {g.OutGrad(0), g.Output(1)}));
      });
  return true;
}();

}  // namespace
}  // namespace weft::cpu
