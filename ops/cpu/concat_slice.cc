// Joining and cutting: concat (num_args inputs along axis `dim`) and slice (a box of the input
// given by begin and end on its leading axes), with their backward ops.
//
// concat: attributes num_args (required, >= 1) and dim (default 1, negative counts from the end);
// every input has the same extents but on `dim`. `_backward_concat` takes (out_grad, arg0, ...)
// (the forward inputs, read only for their shapes) and splits out_grad into num_args gradients.
//
// slice: attributes begin and end, tuples of one entry per leading axis (axes after them are
// kept whole); a negative index counts from the end of its axis; after that 0 <= begin <= end <=
// extent must hold (no clamping, no step). `_backward_slice` takes (out_grad, data) and gives d
// data: out_grad inside the box, 0 elsewhere.
//
// Data-movement kernels accept every dtype (float32, float64, int32, int64, uint8).
#include "ops/internal/cpu_util.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

// ---- concat ----

struct ConcatParam {
  int num_args;
  int dim;
};

ConcatParam ParseConcat(AttrReader& r) { return {r.Int("num_args", std::nullopt, 1), r.Int("dim", 1)}; }

// The output of concat, checking that `parts` agree on every axis but the concat axis.
Shape ConcatShape(const std::vector<Shape>& parts, int dim) {
  const int axis = NormalizeAxis("concat", dim, parts[0].ndim(), parts[0]);
  Shape out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    bool match = parts[i].ndim() == parts[0].ndim();
    for (int a = 0; match && a < parts[0].ndim(); ++a) match = a == axis || parts[i][a] == parts[0][a];
    if (!match) {
      WEFT_THROW("concat: expected input " << i << " to match input 0 " << parts[0] << " on every axis but " << axis
                                           << ", found " << parts[i]);
    }
    out[axis] += parts[i][axis];
  }
  return out;
}

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
void ConcatCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                   std::span<const TensorView> out) {
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
void ConcatBackwardCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                           std::span<const TensorView> out) {
  const ConcatLayout l = MakeConcatLayout(ShapesOf(out), a.Get<ConcatParam>().dim);
  WEFT_DTYPE_SWITCH(in[0].dtype(), T, "_backward_concat", {
    const T* dy = in[0].data<T>();
    ForEachPiece(l, [&](int64_t i, int64_t at_out, int64_t at_in, int64_t len) {
      StoreN(out[i].data<T>() + at_in, req[i], dy + at_out, len);
    });
  });
}

void ConcatGradient(const Attrs& a, GradBuilder& g) {
  const int n = a.Get<ConcatParam>().num_args;
  std::vector<GradEntry> inputs = {g.OutGrad(0)};
  for (int i = 0; i < n; ++i) inputs.push_back(g.Input(i));
  const GradEntry split = g.Op("_backward_concat", inputs, a.raw(), n);
  for (int i = 0; i < n; ++i) g.SetInputGrad(i, g.NodeOutput(split, i));
}

// ---- slice ----

struct SliceParam {
  std::vector<int64_t> begin, end;
};

SliceParam ParseSlice(AttrReader& r) {
  SliceParam p{r.IntList("begin", std::nullopt), r.IntList("end", std::nullopt)};
  if (p.begin.size() != p.end.size()) {
    WEFT_THROW("op 'slice': attributes 'begin' and 'end': expected one entry each per sliced axis, found begin="
               << FormatTuple(p.begin) << " and end=" << FormatTuple(p.end));
  }
  return p;
}

// The box: where it starts in the input, and the output's shape.
struct SliceBox {
  std::array<int64_t, Shape::kMaxDims> begin{};
  Shape out;
};

SliceBox MakeSliceBox(const SliceParam& p, const Shape& in) {
  if (static_cast<int>(p.begin.size()) > in.ndim()) {
    WEFT_THROW("slice: expected at most one begin/end entry per axis of the input "
               << in << ", found begin=" << FormatTuple(p.begin));
  }
  SliceBox box;
  for (int a = 0; a < in.ndim(); ++a) {
    if (a >= static_cast<int>(p.begin.size())) {
      box.out.PushBack(in[a]);
      continue;
    }
    const int64_t d = in[a];
    const int64_t b = p.begin[a] < 0 ? p.begin[a] + d : p.begin[a], e = p.end[a] < 0 ? p.end[a] + d : p.end[a];
    if (b < 0 || e > d || b > e) {
      WEFT_THROW("slice: axis " << a << " of input " << in << ": expected " << -d << " <= begin, end <= " << d
                                << " and begin <= end once negative indices count from the end, found begin "
                                << p.begin[a] << " and end " << p.end[a]);
    }
    box.begin[a] = b;
    box.out.PushBack(e - b);
  }
  return box;
}

// Calls f(input offset, output offset, length) for every row (run along the last axis) of the
// box in `in`, in parallel.
template <typename F>
void ForEachSliceRow(const SliceBox& box, const Shape& in, F&& f) {
  const int n = in.ndim();
  const std::array<int64_t, Shape::kMaxDims> strides = Strides(in);
  const int64_t len = n == 0 ? 1 : box.out[n - 1], rows = len == 0 ? 0 : box.out.Size() / len;
  ParallelFor(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(len, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t at = n == 0 ? 0 : box.begin[n - 1], rest = r;
      for (int a = n - 2; a >= 0; --a) at += (rest % box.out[a] + box.begin[a]) * strides[a], rest /= box.out[a];
      f(at, r * len, len);
    }
  });
}

std::vector<Shape> SliceShape(const Attrs& a, const std::vector<Shape>& in) {
  return {MakeSliceBox(a.Get<SliceParam>(), in[0]).out};
}

// data: any shape; out: the box.
void SliceCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                  std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const SliceBox box = MakeSliceBox(a.Get<SliceParam>(), in[0].shape());
  WEFT_DTYPE_SWITCH(in[0].dtype(), T, "slice", {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    ForEachSliceRow(box, in[0].shape(),
                    [&](int64_t at_in, int64_t at_out, int64_t len) { StoreN(y + at_out, req[0], x + at_in, len); });
  });
}

// in: (out_grad: the box, data); out: d data, data's shape.
void SliceBackwardCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                          std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const SliceBox box = MakeSliceBox(a.Get<SliceParam>(), in[1].shape());
  // Outside the box the gradient is 0: written for a write, nothing to add for kAddTo.
  const OpReq inside = req[0] == OpReq::kAddTo ? OpReq::kAddTo : OpReq::kWrite;
  WEFT_DTYPE_SWITCH(in[0].dtype(), T, "_backward_slice", {
    const T* dy = in[0].data<T>();
    T* dx = out[0].data<T>();
    if (inside == OpReq::kWrite) std::fill_n(dx, out[0].size(), T(0));
    ForEachSliceRow(box, in[1].shape(),
                    [&](int64_t at_in, int64_t at_out, int64_t len) { StoreN(dx + at_in, inside, dy + at_out, len); });
  });
}

const bool registered = [] {
  WEFT_REGISTER_OP(concat)
      .Describe("num_args arrays joined along axis `dim` (default 1); they agree on every other axis")
      .Params(ParseConcat)
      .VariadicInputs([](const Attrs& a) { return a.Get<ConcatParam>().num_args; })
      .InferShape([](const Attrs& a, const std::vector<Shape>& in) {
        return std::vector<Shape>{ConcatShape(in, a.Get<ConcatParam>().dim)};
      })
      .Compute(DeviceType::kCpu, ConcatCompute)
      .Gradient(ConcatGradient);
  WEFT_REGISTER_OP(_backward_concat)
      .Describe("gradient of concat: takes (out_grad, arg0, ...), splits out_grad into one gradient per arg")
      .Params(ParseConcat)
      .VariadicInputs([](const Attrs& a) { return a.Get<ConcatParam>().num_args + 1; })
      .Outputs([](const Attrs& a) { return a.Get<ConcatParam>().num_args; })
      .InferShape([](const Attrs& a, const std::vector<Shape>& in) {
        const std::vector<Shape> args(in.begin() + 1, in.end());
        CheckSameShape(in[0], ConcatShape(args, a.Get<ConcatParam>().dim), "the output gradient and the output");
        return args;
      })
      .Compute(DeviceType::kCpu, ConcatBackwardCompute);
  WEFT_REGISTER_OP(slice)
      .Describe("the box [begin, end) of the input's leading axes (negative indices count from the end)")
      .Params(ParseSlice)
      .Inputs({"data"})
      .InferShape(SliceShape)
      .Compute(DeviceType::kCpu, SliceCompute)
      .Gradient(GradientFromBackwardOp("slice"));
  WEFT_REGISTER_OP(_backward_slice)
      .Describe("gradient of slice: takes (out_grad, data), gives out_grad inside the box and 0 elsewhere")
      .Params(ParseSlice)
      .Inputs({"out_grad", "data"})
      .InferShape([](const Attrs& a, const std::vector<Shape>& in) {
        CheckSameShape(in[0], SliceShape(a, {in[1]})[0], "the output gradient and the output");
        return std::vector<Shape>{in[1]};
      })
      .Compute(DeviceType::kCpu, SliceBackwardCompute);
  return true;
}();

}  // namespace
}  // namespace weft::cpu
