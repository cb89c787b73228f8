// CPU compute of Embedding and _backward_Embedding (ops/nn/embedding.cc defines them and says what
// they compute). An index outside [0, input_dim) is a weft::Error raised by the compute (it comes
// out of the output's WaitToRead), naming the index, where it is and the bound.
#include "ops/cpu/internal/cpu_util.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

// Checks every index in `data` (n values) against [0, input_dim); throws naming the first bad one.
template <typename T>
void CheckIndices(const char* op, const T* data, int64_t n, int input_dim) {
  for (int64_t k = 0; k < n; ++k) {
    if (!(data[k] >= 0 && data[k] < input_dim)) {  // NaN fails too
      WEFT_THROW(op << ": index " << data[k] << " at position " << k
                    << " of data is out of range: expected "
                    << "0 <= index < " << input_dim << " (input_dim)");
    }
  }
}

// idx: n checked indices; w: (input_dim, dim); y: (n, dim). y[k, :] = w[idx[k], :].
template <typename T>
void GatherRows(const T* idx, int64_t n, const T* w, int64_t dim, OpReq req, T* y) {
  ParallelFor(n, std::max<int64_t>(1, 16384 / dim), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k)
      StoreN(y + k * dim, req, w + static_cast<int64_t>(idx[k]) * dim, dim);
  });
}

// dy: (n, dim); idx: n checked indices; dw: (input_dim, dim). dw[idx[k], :] += dy[k, :], after
// zeroing dw unless the request is kAddTo.
template <typename T>
void ScatterAddRows(const T* dy, const T* idx, int64_t n, int64_t dim, OpReq req, T* dw,
                    int64_t dw_size) {
  if (req != OpReq::kAddTo) std::fill_n(dw, dw_size, T(0));
  // Columns split across threads: rows that repeat an index never race.
  ParallelFor(dim, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t k = 0; k < n; ++k) {
      T* row = dw + static_cast<int64_t>(idx[k]) * dim;
      const T* g = dy + k * dim;
      for (int64_t c = c0; c < c1; ++c) row[c] += g[c];
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
  WEFT_FLOAT_SWITCH(rows.dtype(), T, op, {
    const T* idx = data.data<T>();
    CheckIndices(op, idx, data.size(), p.input_dim);
    if (req[0] == OpReq::kNull) return;
    if (kBackward) {
      ScatterAddRows(rows.data<T>(), idx, data.size(), p.output_dim, req[0], out[0].data<T>(),
                     out[0].size());
    } else {
      GatherRows(idx, data.size(), rows.data<T>(), p.output_dim, req[0], out[0].data<T>());
    }
  });
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu,
                           {
                               {"Embedding", {.compute = EmbeddingCompute<false>}},
                               {"_backward_Embedding", {.compute = EmbeddingCompute<true>}},
                           });

}  // namespace
}  // namespace weft::cpu
