// CPU compute of Embedding and _backward_Embedding (ops/nn/embedding.cc defines them and says what
// they compute). An index outside [0, input_dim) is a weft::Error raised by the compute (it comes
// out of the output's WaitToRead), naming the index, where it is and the bound.
#include <algorithm>
#include <cstdint>

#include "core/bfloat16.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

// An index as a double (exact for every index dtype), and a weight value's arithmetic.
template <typename I>
double IndexValue(I v) {
  return static_cast<double>(v);
}
template <>
double IndexValue(BFloat16 v) {
  return v.ToFloat();
}
template <typename T>
T Sum(T a, T b) {
  return a + b;
}
template <>
BFloat16 Sum(BFloat16 a, BFloat16 b) {  // rounded once, as the elementwise add rounds
  return BFloat16::FromFloat(a.ToFloat() + b.ToFloat());
}

// Runs f(T{}) for the weight's dtype (float32, float64, bfloat16), f(I{}) for the index's.
template <typename F>
void WithWeightType(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat64:
      return f(double{});
    case DType::kBFloat16:
      return f(BFloat16{});
    default:
      WEFT_THROW(op << ": expected weights of float32, float64 or bfloat16, found " << t);
  }
}
template <typename F>
void WithIndexType(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::kInt32:
      return f(int32_t{});
    case DType::kInt64:
      return f(int64_t{});
    default:
      return WithWeightType(t, op, f);  // float32, float64, bfloat16
  }
}

// The elements of `t`, whose dtype the switches above matched to T.
template <typename T>
T* Elements(const TensorView& t) {
  return static_cast<T*>(t.raw());
}

// Checks every index in `data` (n values) against [0, input_dim); throws naming the first bad one.
template <typename I>
void CheckIndices(const char* op, const I* data, int64_t n, int input_dim) {
  for (int64_t k = 0; k < n; ++k) {
    const double v = IndexValue(data[k]);
    if (!(v >= 0 && v < input_dim)) {  // NaN fails too
      WEFT_THROW(op << ": index " << v << " at position " << k
                    << " of data is out of range: expected "
                    << "0 <= index < " << input_dim << " (input_dim)");
    }
  }
}

// idx: n checked indices; w: (input_dim, dim); y: (n, dim). y[k, :] = w[idx[k], :] (added for
// kAddTo).
template <typename T, typename I>
void GatherRows(const I* idx, int64_t n, const T* w, int64_t dim, OpReq req, T* y) {
  ParallelFor(n, std::max<int64_t>(1, 16384 / dim), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const T* row = w + static_cast<int64_t>(IndexValue(idx[k])) * dim;
      T* out = y + k * dim;
      if (req == OpReq::kAddTo) {
        for (int64_t c = 0; c < dim; ++c) out[c] = Sum(out[c], row[c]);
      } else {
        std::copy_n(row, dim, out);
      }
    }
  });
}

// dy: (n, dim); idx: n checked indices; dw: (input_dim, dim). dw[idx[k], :] += dy[k, :], after
// zeroing dw unless the request is kAddTo.
template <typename T, typename I>
void ScatterAddRows(const T* dy, const I* idx, int64_t n, int64_t dim, OpReq req, T* dw,
                    int64_t dw_size) {
  if (req != OpReq::kAddTo) std::fill_n(dw, dw_size, T{});
  // Columns split across threads: rows that repeat an index never race.
  ParallelFor(dim, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t k = 0; k < n; ++k) {
      T* row = dw + static_cast<int64_t>(IndexValue(idx[k])) * dim;
      const T* g = dy + k * dim;
      for (int64_t c = c0; c < c1; ++c) row[c] = Sum(row[c], g[c]);
    }
  });
}

// Forward: in = (data, weight), out = rows of weight. Backward: in = (out_grad, data), out = d
// weight. Both check every index first, so a bad one fails the op before anything is written.
template <bool kBackward>
void EmbeddingCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                      std::span<const OpReq> req, std::span<const TensorView> out) {
  const EmbeddingParam& p = a.Get<EmbeddingParam>();
  const TensorView &data = in[kBackward ? 1 : 0], &rows = in[kBackward ? 0 : 1];
  const char* op = kBackward ? "_backward_Embedding" : "Embedding";
  WithWeightType(rows.dtype(), op, [&](auto weight) {
    using T = decltype(weight);
    WithIndexType(data.dtype(), op, [&](auto index) {
      using I = decltype(index);
      const I* idx = Elements<const I>(data);
      CheckIndices(op, idx, data.size(), p.input_dim);
      if (req[0] == OpReq::kNull) return;
      if (kBackward) {
        ScatterAddRows(Elements<const T>(rows), idx, data.size(), p.output_dim, req[0],
                       Elements<T>(out[0]), out[0].size());
      } else {
        GatherRows(idx, data.size(), Elements<const T>(rows), p.output_dim, req[0],
                   Elements<T>(out[0]));
      }
    });
  });
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu,
                           {
                               {"Embedding", {.compute = EmbeddingCompute<false>}},
                               {"_backward_Embedding", {.compute = EmbeddingCompute<true>}},
                           });

}  // namespace
}  // namespace weft::cpu
