// Joining and cutting: concat (num_args inputs along axis `dim`), slice (a box of the input given
// by begin and end on its leading axes) and split (equal parts along an axis), with their backward
// ops.
//
// concat: attributes num_args (required, >= 1) and dim (default 1, negative counts from the end);
// every input has the same extents but on `dim`. `_backward_concat` takes (out_grad, arg0, ...)
// (the forward inputs, read only for their shapes) and splits out_grad into num_args gradients.
//
// slice: attributes begin and end, tuples of one entry per sliced axis: the leading axes, or those
// `axes` names (the others are kept whole); a negative index counts from the end of its axis;
// after that 0 <= begin <= end <= extent must hold (no clamping, no step). `_backward_slice` takes
// (out_grad, data) and gives d data: out_grad inside the box, 0 elsewhere.
//
// split: num_outputs (required, >= 1) equal parts of data along `axis` (default 1, negative counts
// from the end), as MXNet's split (SliceChannel); the extent must divide. With squeeze_axis
// (default false) each part drops the axis, which needs parts of extent 1. Its gradient,
// `_backward_split`, takes the num_outputs output gradients (zeros where an output has none: the
// gradient pass adds them) and joins them along the axis, as concat does.
//
// Compute: ops/cpu/concat_slice.cc, ops/gpu/concat_slice.cc (every dtype).
#include "core/error.h"
#include "ops/internal/op_util.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft {
namespace {

// ---- concat ----

ConcatParam ParseConcat(AttrReader& r) {
  return {r.Int("num_args", std::nullopt, 1), r.Int("dim", 1)};
}

// The output of concat, checking that `parts` agree on every axis but the concat axis.
Shape ConcatShape(const std::vector<Shape>& parts, int dim) {
  const int axis = NormalizeAxis("concat", dim, parts[0].ndim(), parts[0]);
  Shape out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    bool match = parts[i].ndim() == parts[0].ndim();
    for (int a = 0; match && a < parts[0].ndim(); ++a)
      match = a == axis || parts[i][a] == parts[0][a];
    if (!match) {
      WEFT_THROW("concat: expected input " << i << " to match input 0 " << parts[0]
                                           << " on every axis but " << axis << ", found "
                                           << parts[i]);
    }
    out[axis] += parts[i][axis];
  }
  return out;
}

void ConcatGradient(const Attrs& a, GradBuilder& g) {
  const int n = a.Get<ConcatParam>().num_args;
  std::vector<GradEntry> inputs = {g.OutGrad(0)};
  for (int i = 0; i < n; ++i) inputs.push_back(g.Input(i));
  const GradEntry split = g.Op("_backward_concat", inputs, a.raw(), n);
  for (int i = 0; i < n; ++i) g.SetInputGrad(i, g.NodeOutput(split, i));
}

// in: (out_grad, arg0, ..., arg{n-1}).
std::vector<Shape> ConcatBackwardShape(const Attrs& a, const std::vector<Shape>& in) {
  const std::vector<Shape> args(in.begin() + 1, in.end());
  CheckSameShape(in[0], ConcatShape(args, a.Get<ConcatParam>().dim),
                 "the output gradient and the output");
  return args;
}

// ---- slice ----

SliceParam ParseSlice(AttrReader& r) {
  SliceParam p{r.IntList("begin", std::nullopt), r.IntList("end", std::nullopt),
               r.IntList("axes", std::vector<int64_t>{})};
  if (!p.axes.empty() && p.axes.size() != p.begin.size()) {
    WEFT_THROW("op 'slice': attribute 'axes': expected one axis per begin/end entry, found axes="
               << FormatTuple(p.axes) << " and begin=" << FormatTuple(p.begin));
  }
  if (p.begin.size() != p.end.size()) {
    WEFT_THROW(
        "op 'slice': attributes 'begin' and 'end': expected one entry each per sliced axis, found "
        "begin="
        << FormatTuple(p.begin) << " and end=" << FormatTuple(p.end));
  }
  return p;
}

std::vector<Shape> SliceShape(const Attrs& a, const std::vector<Shape>& in) {
  return {MakeSliceBox(a.Get<SliceParam>(), in[0]).out};
}

// in: (out_grad, data).
std::vector<Shape> SliceBackwardShape(const Attrs& a, const std::vector<Shape>& in) {
  CheckSameShape(in[0], SliceShape(a, {in[1]})[0], "the output gradient and the output");
  return {in[1]};
}

// ---- split ----

SplitParam ParseSplit(AttrReader& r) {
  return {r.Int("num_outputs", std::nullopt, 1), r.Int("axis", 1), r.Bool("squeeze_axis", false)};
}

// The shape of each part of `data`, checking that the axis divides.
Shape SplitPartShape(const SplitParam& p, const Shape& data) {
  const int axis = NormalizeAxis("split", p.axis, data.ndim(), data);
  if (data[axis] % p.num_outputs != 0) {
    WEFT_THROW("split: axis " << axis << " of data " << data << " has extent " << data[axis]
                              << ", which does not divide into num_outputs=" << p.num_outputs
                              << " equal parts");
  }
  Shape part = data;
  part[axis] /= p.num_outputs;
  if (!p.squeeze_axis) return part;
  if (part[axis] != 1) {
    WEFT_THROW("split: squeeze_axis needs parts of extent 1 along axis "
               << axis << ", found " << part[axis] << " (data " << data
               << ", num_outputs=" << p.num_outputs << ")");
  }
  Shape squeezed;
  for (int a = 0; a < part.ndim(); ++a) {
    if (a != axis) squeezed.PushBack(part[a]);
  }
  return squeezed;
}

std::vector<Shape> SplitShape(const Attrs& a, const std::vector<Shape>& in) {
  const SplitParam& p = a.Get<SplitParam>();
  return std::vector<Shape>(p.num_outputs, SplitPartShape(p, in[0]));
}

// in: the num_outputs output gradients, of one shape (the part's).
std::vector<Shape> SplitBackwardShape(const Attrs& a, const std::vector<Shape>& in) {
  const SplitParam& p = a.Get<SplitParam>();
  for (size_t i = 1; i < in.size(); ++i) CheckSameShape(in[i], in[0], "the output gradients");
  Shape data;
  const int ndim = in[0].ndim() + (p.squeeze_axis ? 1 : 0);
  const int axis = NormalizeAxis("_backward_split", p.axis, ndim, in[0]);
  for (int a = 0, k = 0; a < ndim; ++a) {
    const bool inserted = p.squeeze_axis && a == axis;
    data.PushBack((inserted ? 1 : in[0][k++]) * (a == axis ? p.num_outputs : 1));
  }
  return {data};
}

void SplitGradient(const Attrs& a, GradBuilder& g) {
  const int n = a.Get<SplitParam>().num_outputs;
  std::vector<GradEntry> grads;
  for (int i = 0; i < n; ++i) grads.push_back(g.OutGrad(i));
  g.SetInputGrad(0, g.Op("_backward_split", grads, a.raw()));
}

const bool defined = [] {
  WEFT_REGISTER_OP(concat)
      .Describe(
          "num_args arrays joined along axis `dim` (default 1); they agree on every other axis")
      .Params(ParseConcat)
      .VariadicInputs([](const Attrs& a) { return a.Get<ConcatParam>().num_args; })
      .InferShape([](const Attrs& a, const std::vector<Shape>& in) {
        return std::vector<Shape>{ConcatShape(in, a.Get<ConcatParam>().dim)};
      })
      .Gradient(ConcatGradient);
  WEFT_REGISTER_OP(_backward_concat)
      .Describe(
          "gradient of concat: takes (out_grad, arg0, ...), splits out_grad into one gradient per "
          "arg")
      .Params(ParseConcat)
      .VariadicInputs([](const Attrs& a) { return a.Get<ConcatParam>().num_args + 1; })
      .Outputs([](const Attrs& a) { return a.Get<ConcatParam>().num_args; })
      .InferShape(ConcatBackwardShape);
  WEFT_REGISTER_OP(slice)
      .Describe(
          "the box [begin, end) of the input's leading axes, or of `axes` (negative indices "
          "count from the end)")
      .Params(ParseSlice)
      .Inputs({"data"})
      .InferShape(SliceShape)
      .Gradient(GradientFromBackwardOp("slice"));
  WEFT_REGISTER_OP(_backward_slice)
      .Describe(
          "gradient of slice: takes (out_grad, data), gives out_grad inside the box and 0 "
          "elsewhere")
      .Params(ParseSlice)
      .Inputs({"out_grad", "data"})
      .InferShape(SliceBackwardShape);
  WEFT_REGISTER_OP(split)
      .Describe(
          "num_outputs equal parts of data along `axis` (default 1), as MXNet's split; "
          "squeeze_axis drops the axis from parts of extent 1")
      .Params(ParseSplit)
      .Inputs({"data"})
      .Outputs([](const Attrs& a) { return a.Get<SplitParam>().num_outputs; })
      .InferShape(SplitShape)
      .Gradient(SplitGradient);
  WEFT_REGISTER_OP(_backward_split)
      .Describe("gradient of split: the num_outputs output gradients joined along the axis")
      .Params(ParseSplit)
      .VariadicInputs([](const Attrs& a) { return a.Get<SplitParam>().num_outputs; })
      .InferShape(SplitBackwardShape);
  return true;
}();

}  // namespace
}  // namespace weft
