// CPU compute of write_at (ops/tensor/write_at.cc defines it and says what it computes): rows of
// bytes copied, any dtype (an output of memory of its own that adds: those of WEFT_DTYPE_SWITCH). A
// bad index is a weft::Error raised by the compute (it comes out of the output's WaitToRead) before
// anything is written.
#include <cstring>

#include "ops/cpu/internal/cpu_util.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft::cpu {
namespace {

// The offset `index` holds, after checking that a slab of k fits from it into [0, n).
int64_t CheckedOffset(const TensorView& index, int64_t k, int64_t n) {
  int64_t offset = 0;
  WEFT_DTYPE_SWITCH(index.dtype(), I, "write_at", {
    const I v = index.data<I>()[0];
    if (!(v >= 0 && static_cast<double>(v) <= static_cast<double>(n - k))) {  // NaN too
      WEFT_THROW("write_at: index " << +v << " is out of range: expected 0 <= index <= " << n - k
                                    << " (a slab of " << k << " along an axis of " << n << ")");
    }
    offset = static_cast<int64_t>(v);
  });
  return offset;
}

// in: (data, value, index); out: data, updated (the same memory when bound in a graph).
void WriteAtCompute(const OpContext&, const Attrs& attrs, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out) {
  const WriteAtParam& p = attrs.Get<WriteAtParam>();
  const int axis = p.axis < 0 ? p.axis + in[0].shape().ndim() : p.axis;
  const TakeLayout l = MakeTakeLayout(p, in[0].shape(), in[1].shape()[axis], "write_at");
  const int64_t offset = CheckedOffset(in[2], l.k, l.n);
  const size_t row = static_cast<size_t>(l.k * l.inner) * DTypeSize(in[0].dtype());
  const size_t stride = static_cast<size_t>(l.n * l.inner) * DTypeSize(in[0].dtype());
  const size_t at = static_cast<size_t>(offset * l.inner) * DTypeSize(in[0].dtype());
  auto* data = static_cast<char*>(in[0].raw());
  const auto* value = static_cast<const char*>(in[1].raw());
  for (int64_t o = 0; o < l.outer; ++o) std::memcpy(data + o * stride + at, value + o * row, row);
  if (req[0] == OpReq::kAddTo) {
    WEFT_DTYPE_SWITCH(in[0].dtype(), T, "write_at",
                      { StoreN(out[0].data<T>(), req[0], in[0].data<T>(), in[0].size()); });
  } else if (Writes(req[0]) && out[0].raw() != in[0].raw()) {
    std::memcpy(out[0].raw(), in[0].raw(), stride * l.outer);
  }
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, {{"write_at", {.compute = WriteAtCompute}}});

}  // namespace
}  // namespace weft::cpu
