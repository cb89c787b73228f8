// CPU compute of concat, slice and their backward ops (ops/tensor/concat_slice.cc defines them and
// says what they compute): contiguous pieces copied in parallel, on every dtype (float32, float64,
// int32, int64, uint8).
#include "ops/cpu/internal/cpu_util.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft::cpu {
namespace {

// ---- concat ----

// Each input is a sequence of `outer` pieces; piece o of input i (len[i] elements, contiguous)
// sits at o * total + offset[i] in the output.
struct ConcatLayout {
  int64_t outer = 1, total = 0;
  std::vector<int64_t> len, offset;
};

ConcatLayout MakeConcatLayout(const std::vector<Shape>& parts, int dim) {
  const int axis = NormalizeAxis("concat", dim, parts[0].ndim(), parts[0]);
  ConcatLayout l;
  for (int a = 0; a < axis; ++a) l.outer *= parts[0][a];
  for (const Shape& s : parts) {
    int64_t len = 1;
    for (int a = axis; a < s.ndim(); ++a) len *= s[a];
    l.offset.push_back(l.total);
    l.len.push_back(len);
    l.total += len;
  }
  return l;
}

// Calls f(input, output offset, input offset, length) for every piece, in parallel.
template <typename F>
void ForEachPiece(const ConcatLayout& l, F&& f) {
  const int64_t n = static_cast<int64_t>(l.len.size());
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, l.total / n));
  ParallelFor(l.outer * n, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / n, i = t % n;
      f(i, o * l.total + l.offset[i], o * l.len[i], l.len[i]);
    }
  });
}

std::vector<Shape> ShapesOf(std::span<const TensorView> views) {
  std::vector<Shape> shapes;
  for (const TensorView& v : views) shapes.push_back(v.shape());
  return shapes;
}

// inputs: num_args arrays that agree but on `dim`; out: them side by side along `dim`.
void ConcatCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                   std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const ConcatLayout l = MakeConcatLayout(ShapesOf(in), a.Get<ConcatParam>().dim);
  WEFT_DTYPE_SWITCH(out[0].dtype(), T, "concat", {
    T* y = out[0].data<T>();
    ForEachPiece(l, [&](int64_t i, int64_t at_out, int64_t at_in, int64_t len) {
      StoreN(y + at_out, req[0], in[i].data<T>() + at_in, len);
    });
  });
}

// in: (out_grad, arg0, ..., arg{n-1}); out: n gradients, shaped like the args.
void ConcatBackwardCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                           std::span<const OpReq> req, std::span<const TensorView> out) {
  const ConcatLayout l = MakeConcatLayout(ShapesOf(out), a.Get<ConcatParam>().dim);
  WEFT_DTYPE_SWITCH(in[0].dtype(), T, "_backward_concat", {
    const T* dy = in[0].data<T>();
    ForEachPiece(l, [&](int64_t i, int64_t at_out, int64_t at_in, int64_t len) {
      StoreN(out[i].data<T>() + at_in, req[i], dy + at_out, len);
    });
  });
}

// ---- slice ----

// Calls f(input offset, output offset, length) for every row (run along the last axis) of the
// box in `in`, in parallel.
template <typename F>
void ForEachSliceRow(const SliceBox& box, const Shape& in, F&& f) {
  const int n = in.ndim();
  const std::array<int64_t, Shape::kMaxDims> strides = Strides(in);
  const int64_t len = n == 0 ? 1 : box.out[n - 1], rows = len == 0 ? 0 : box.out.Size() / len;
  ParallelFor(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(len, 1)),
              [&](int64_t b, int64_t e) {
                for (int64_t r = b; r < e; ++r) {
                  int64_t at = n == 0 ? 0 : box.begin[n - 1], rest = r;
                  for (int a = n - 2; a >= 0; --a)
                    at += (rest % box.out[a] + box.begin[a]) * strides[a], rest /= box.out[a];
                  f(at, r * len, len);
                }
              });
}

// data: any shape; out: the box.
void SliceCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const SliceBox box = MakeSliceBox(a.Get<SliceParam>(), in[0].shape());
  WEFT_DTYPE_SWITCH(in[0].dtype(), T, "slice", {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    ForEachSliceRow(box, in[0].shape(), [&](int64_t at_in, int64_t at_out, int64_t len) {
      StoreN(y + at_out, req[0], x + at_in, len);
    });
  });
}

// in: (out_grad: the box, data); out: d data, data's shape.
void SliceBackwardCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                          std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const SliceBox box = MakeSliceBox(a.Get<SliceParam>(), in[1].shape());
  // Outside the box the gradient is 0: written for a write, nothing to add for kAddTo.
  const OpReq inside = req[0] == OpReq::kAddTo ? OpReq::kAddTo : OpReq::kWrite;
  WEFT_DTYPE_SWITCH(in[0].dtype(), T, "_backward_slice", {
    const T* dy = in[0].data<T>();
    T* dx = out[0].data<T>();
    if (inside == OpReq::kWrite) std::fill_n(dx, out[0].size(), T(0));
    ForEachSliceRow(box, in[1].shape(), [&](int64_t at_in, int64_t at_out, int64_t len) {
      StoreN(dx + at_in, inside, dy + at_out, len);
    });
  });
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu,
                           {
                               {"concat", {.compute = ConcatCompute}},
                               {"_backward_concat", {.compute = ConcatBackwardCompute}},
                               {"slice", {.compute = SliceCompute}},
                               {"_backward_slice", {.compute = SliceBackwardCompute}},
                           });

}  // namespace
}  // namespace weft::cpu
