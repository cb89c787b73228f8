// CPU compute of concat, slice, split and their backward ops (ops/tensor/concat_slice.cc defines
// them and says what they compute): contiguous pieces copied in parallel, on every dtype (float32,
// float64, bfloat16, int32, int64, uint8).
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

// `parts` joined along `axis` (normalized), which they agree before (a part may lack the axis
// itself: split's squeezed parts).
ConcatLayout MakeConcatLayout(std::span<const TensorView> parts, int axis) {
  ConcatLayout l;
  for (int a = 0; a < axis; ++a) l.outer *= parts[0].shape()[a];
  for (const TensorView& p : parts) {
    const int64_t len = l.outer == 0 ? 0 : p.size() / l.outer;
    l.offset.push_back(l.total);
    l.len.push_back(len);
    l.total += len;
  }
  return l;
}

int ConcatAxis(const Attrs& a, const Shape& part) {
  return NormalizeAxis("concat", a.Get<ConcatParam>().dim, part.ndim(), part);
}

// The split axis of `data` (attribute axis, as checked by shape inference).
int SplitAxis(const Attrs& a, const Shape& data) {
  return NormalizeAxis("split", a.Get<SplitParam>().axis, data.ndim(), data);
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

// parts: arrays that agree but on `axis`; whole: them side by side along it.
void Join(std::span<const TensorView> parts, int axis, OpReq req, const TensorView& whole) {
  if (req == OpReq::kNull) return;
  const ConcatLayout l = MakeConcatLayout(parts, axis);
  WEFT_MOVE_SWITCH(whole.dtype(), T, "concat", {
    T* y = whole.data<T>();
    ForEachPiece(l, [&](int64_t i, int64_t at_out, int64_t at_in, int64_t len) {
      StoreN(y + at_out, req, parts[i].data<T>() + at_in, len);
    });
  });
}

// Join's inverse: whole cut into `parts` along `axis`, each stored as its request says.
void Cut(const TensorView& whole, int axis, std::span<const OpReq> req,
         std::span<const TensorView> parts) {
  const ConcatLayout l = MakeConcatLayout(parts, axis);
  WEFT_MOVE_SWITCH(whole.dtype(), T, "split", {
    const T* dy = whole.data<T>();
    ForEachPiece(l, [&](int64_t i, int64_t at_out, int64_t at_in, int64_t len) {
      StoreN(parts[i].data<T>() + at_in, req[i], dy + at_out, len);
    });
  });
}

// inputs: num_args arrays that agree but on `dim`; out: them side by side along `dim`.
void ConcatCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                   std::span<const OpReq> req, std::span<const TensorView> out) {
  Join(in, ConcatAxis(a, in[0].shape()), req[0], out[0]);
}

// in: (out_grad, arg0, ..., arg{n-1}); out: n gradients, shaped like the args.
void ConcatBackwardCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                           std::span<const OpReq> req, std::span<const TensorView> out) {
  Cut(in[0], ConcatAxis(a, out[0].shape()), req, out);
}

// ---- split ----

// data: any shape; out: num_outputs parts along the axis (squeezed or not).
void SplitCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  Cut(in[0], SplitAxis(a, in[0].shape()), req, out);
}

// in: the num_outputs output gradients; out: d data.
void SplitBackwardCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                          std::span<const OpReq> req, std::span<const TensorView> out) {
  Join(in, SplitAxis(a, out[0].shape()), req[0], out[0]);
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
  WEFT_MOVE_SWITCH(in[0].dtype(), T, "slice", {
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
  WEFT_MOVE_SWITCH(in[0].dtype(), T, "_backward_slice", {
    const T* dy = in[0].data<T>();
    T* dx = out[0].data<T>();
    if (inside == OpReq::kWrite) std::fill_n(dx, out[0].size(), T{});
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
                               {"split", {.compute = SplitCompute}},
                               {"_backward_split", {.compute = SplitBackwardCompute}},
                           });

}  // namespace
}  // namespace weft::cpu
