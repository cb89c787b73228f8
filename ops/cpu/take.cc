// CPU compute of take and _backward_take (ops/tensor/take.cc defines them and says what they
// compute). An index outside [0, a.shape[axis]) is a weft::Error raised by the compute (it comes
// out of the output's WaitToRead), naming the index, its position and the bound; both ops check
// every index before they write anything.
#include "ops/cpu/internal/cpu_util.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft::cpu {
namespace {

// The indices as rows of a, after checking each against [0, n); throws naming the first bad one.
std::vector<int64_t> CheckedRows(const char* op, const TensorView& indices, int64_t n) {
  std::vector<int64_t> rows(indices.size());
  WEFT_DTYPE_SWITCH(indices.dtype(), I, op, {
    const I* idx = indices.data<I>();
    for (size_t j = 0; j < rows.size(); ++j) {
      if (!(idx[j] >= 0 && static_cast<double>(idx[j]) < static_cast<double>(n))) {  // NaN too
        WEFT_THROW(op << ": index " << +idx[j] << " at position " << j
                      << " of indices is out of range: expected 0 <= index < " << n
                      << " (the extent of a's axis)");
      }
      rows[j] = static_cast<int64_t>(idx[j]);
    }
  });
  return rows;
}

// in: (a, indices); out: a.shape[:axis] + indices.shape + a.shape[axis+1:].
void TakeCompute(const OpContext&, const Attrs& attrs, std::span<const TensorView> in,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  const TakeLayout l = MakeTakeLayout(attrs.Get<TakeParam>(), in[0].shape(), in[1].size());
  const std::vector<int64_t> rows = CheckedRows("take", in[1], l.n);
  if (req[0] == OpReq::kNull) return;
  WEFT_MOVE_SWITCH(in[0].dtype(), T, "take", {
    const T* a = in[0].data<T>();
    T* y = out[0].data<T>();
    ParallelFor(l.outer * l.k, std::max<int64_t>(1, 16384 / l.inner), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / l.k, j = t % l.k;
        StoreN(y + t * l.inner, req[0], a + (o * l.n + rows[j]) * l.inner, l.inner);
      }
    });
  });
}

// dy: (outer, k, inner); da: (outer, n, inner), zeroed unless the request adds. da[o, rows[j], i]
// += dy[o, j, i], each element summed in index order: threads split the (o, i) columns. T is
// float32 or float64 (bfloat16 sums in float32 scratch: TakeBackwardCompute).
template <typename T>
void ScatterAdd(const TakeLayout& l, const std::vector<int64_t>& rows, const T* dy, OpReq req,
                T* da) {
  if (req != OpReq::kAddTo) std::fill_n(da, l.outer * l.n * l.inner, T(0));
  ParallelFor(l.outer * l.inner, 64, [&](int64_t b, int64_t e) {
    while (b < e) {  // one run of columns within one o at a time
      const int64_t o = b / l.inner, i0 = b % l.inner, i1 = std::min(l.inner, i0 + (e - b));
      for (int64_t j = 0; j < l.k; ++j) {
        T* to = da + (o * l.n + rows[j]) * l.inner;
        const T* from = dy + (o * l.k + j) * l.inner;
        for (int64_t i = i0; i < i1; ++i) to[i] += from[i];
      }
      b += i1 - i0;
    }
  });
}

// in: (out_grad, indices, a: read for its shape); out: d a.
void TakeBackwardCompute(const OpContext& ctx, const Attrs& attrs, std::span<const TensorView> in,
                         std::span<const OpReq> req, std::span<const TensorView> out) {
  const TakeLayout l = MakeTakeLayout(attrs.Get<TakeParam>(), in[2].shape(), in[1].size());
  const std::vector<int64_t> rows = CheckedRows("_backward_take", in[1], l.n);
  if (req[0] == OpReq::kNull) return;
  if (in[0].dtype() == DType::kBFloat16) {  // summed in float32, rounded once
    const int64_t n = in[0].size(), size = out[0].size();
    float* scratch = static_cast<float*>(ctx.Workspace((n + size) * sizeof(float)));
    WidenBf16(in[0].data<BFloat16>(), scratch, n);
    ScatterAdd(l, rows, scratch, OpReq::kWrite, scratch + n);
    NarrowBf16(scratch + n, req[0], out[0].data<BFloat16>(), size);
    return;
  }
  WEFT_FLOAT_SWITCH(in[0].dtype(), T, "_backward_take",
                    { ScatterAdd(l, rows, in[0].data<T>(), req[0], out[0].data<T>()); });
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu,
                           {
                               {"take", {.compute = TakeCompute}},
                               {"_backward_take", {.compute = TakeBackwardCompute}},
                           });

}  // namespace
}  // namespace weft::cpu
