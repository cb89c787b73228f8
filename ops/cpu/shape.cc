// CPU compute of the shape ops (ops/tensor/shape.cc defines them and says what they compute):
// reshape, reshape_dims, expand_dims, flatten and reshape_like copy their input in row-major order;
// transpose gathers each output row, or on float32 runs oneDNN's reorder (the input described with
// its strides permuted: a blocked copy, several times faster than gathering along a stride, as
// channels_last.h's NCHW <-> NHWC transposes are). Every dtype (float32, float64, int32, int64,
// uint8).
#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/dnnl_util.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft::cpu {
namespace {

// in: any shape; out: the same number of elements. out = in, element by element.
void CopyCompute(const OpContext&, const Attrs&, std::span<const TensorView> in,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  WEFT_DTYPE_SWITCH(in[0].dtype(), T, "copy", {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    ParallelFor(in[0].size(), 1 << 16,
                [&](int64_t b, int64_t e) { StoreN(y + b, req[0], x + b, e - b); });
  });
}

// x: (d_0, ..., d_{n-1}); y: (d_{axes[0]}, ..., d_{axes[n-1]}), y[c] = x[c_k at axis axes[k]].
void TransposeCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                      std::span<const OpReq> req, std::span<const TensorView> out) {
  const int n = in[0].ndim();
  if (req[0] == OpReq::kNull) return;
  if (n <= 1) return CopyCompute(ctx, a, in, req, out);
  const std::vector<int64_t> axes = TransposePermutation(a.Get<TransposeParam>(), n);
  const std::array<int64_t, Shape::kMaxDims> in_strides = Strides(in[0].shape());
  const Shape& shape = out[0].shape();
  if (in[0].dtype() == DType::kFloat32 && req[0] != OpReq::kAddTo) {
    dnnl::memory::dims strides;  // of the input, along the output's axes
    for (int k = 0; k < n; ++k) strides.push_back(in_strides[axes[k]]);
    const dnnl::memory::desc permuted(dnnl::memory::dims(shape.dims().begin(), shape.dims().end()),
                                      dnnl::memory::data_type::f32, strides);
    return Reorder(dnnl::memory(permuted, DnnlEngine(), in[0].raw()), DnnlMemory(out[0]));
  }
  const int64_t len = shape[n - 1], step = in_strides[axes[n - 1]],
                rows = len == 0 ? 0 : shape.Size() / len;
  WEFT_DTYPE_SWITCH(in[0].dtype(), T, "transpose", {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    ParallelFor(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(len, 1)),
                [&](int64_t b, int64_t e) {
                  for (int64_t r = b; r < e; ++r) {
                    int64_t base = 0, rest = r;  // base: input offset of the row's first element
                    for (int k = n - 2; k >= 0; --k)
                      base += (rest % shape[k]) * in_strides[axes[k]], rest /= shape[k];
                    T* row = y + r * len;
                    for (int64_t j = 0; j < len; ++j) Store(row[j], req[0], x[base + j * step]);
                  }
                });
  });
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, {
                                                 {"reshape", {.compute = CopyCompute}},
                                                 {"expand_dims", {.compute = CopyCompute}},
                                                 {"flatten", {.compute = CopyCompute}},
                                                 {"reshape_like", {.compute = CopyCompute}},
                                                 {"reshape_dims", {.compute = CopyCompute}},
                                                 {"transpose", {.compute = TransposeCompute}},
                                             });

}  // namespace
}  // namespace weft::cpu
