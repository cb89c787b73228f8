// Tensor ops: reductions (sum, mean, max), shape ops (reshape, expand_dims, flatten,
// reshape_like, transpose, _strided_copy), concat, slice, split, take, write_at, Embedding and
// Dropout. Each declarative case runs forward (req write and add) against a plain reference loop
// written from the op's definition, and checks the gradient against finite differences (see
// op_test_util.h). Dropout, whose training output is random, has its own tests.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "core/error.h"
#include "executor/executor.h"
#include "graph/symbol.h"
#include "ops/op.h"
#include "storage/ndarray.h"
#include "storage/random.h"
#include "tests/op_test_util.h"
#include "weft/imperative.h"

namespace weft::testing {
namespace {

// Row-major coordinates of element `index` of `shape`.
std::vector<int64_t> Coords(int64_t index, const Shape& shape) {
  std::vector<int64_t> c(shape.ndim());
  for (int a = shape.ndim() - 1; a >= 0; --a) c[a] = index % shape[a], index /= shape[a];
  return c;
}

// Row-major index of the element at `coords` of `shape`.
int64_t Index(const std::vector<int64_t>& coords, const Shape& shape) {
  int64_t index = 0;
  for (int a = 0; a < shape.ndim(); ++a) index = index * shape[a] + coords[a];
  return index;
}

template <typename I>
std::string Tuple(const std::vector<I>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

Shape OutputShape(const std::string& op, const AttrMap& attrs, const std::vector<Shape>& inputs) {
  const Op& def = GetOp(op);
  return InferShapes(def, ParseAttrs(def, attrs), inputs).at(0);
}

// ---- reductions ----

// Folds every input element into the output element at its own coordinates with the reduced
// axes set to 0 (the keepdims layout, which has the same order as the other one).
OpCase ReduceCase(const std::string& op, Shape in, std::vector<int> axes, bool keepdims) {
  AttrMap attrs = {{"keepdims", keepdims ? "true" : "false"}};
  if (!axes.empty()) attrs["axis"] = Tuple(axes);
  OpCase c{op, attrs, {in}, [op, in, axes](const Inputs& x) {
             std::vector<bool> reduced(in.ndim(), axes.empty());
             for (int a : axes) reduced[a < 0 ? a + in.ndim() : a] = true;
             Shape kept;
             for (int a = 0; a < in.ndim(); ++a) kept.PushBack(reduced[a] ? 1 : in[a]);
             Values y(kept.Size(), op == "max" ? -std::numeric_limits<double>::infinity() : 0.0);
             Values count(kept.Size(), 0.0);
             for (int64_t i = 0; i < in.Size(); ++i) {
               std::vector<int64_t> at = Coords(i, in);
               for (int a = 0; a < in.ndim(); ++a) at[a] = reduced[a] ? 0 : at[a];
               const int64_t o = Index(at, kept);
               y[o] = op == "max" ? std::max(y[o], x[0][i]) : y[o] + x[0][i];
               count[o] += 1;
             }
             for (size_t o = 0; o < y.size() && op == "mean"; ++o) y[o] /= count[o];
             return Outputs{y};
           }};
  c.name = op + " " + in.ToString() + " axis=" + Tuple(axes) + (keepdims ? " keepdims" : "");
  return c;
}

TEST(Reductions, SumMeanMaxOverAxesMatchTheReference) {
  const std::vector<std::pair<std::vector<int>, bool>> axes = {
      {{1}, false},  {{0}, false},     {{2}, true}, {{0, 2}, false},
      {{-1}, false}, {{-3, -1}, true}, {{}, false}, {{}, true},
  };
  for (const std::string op : {"sum", "mean", "max"}) {
    for (const auto& [a, keepdims] : axes) RunOpCase(ReduceCase(op, Shape{2, 3, 4}, a, keepdims));
    RunOpCase(ReduceCase(op, Shape{3, 5}, {0}, false));  // over the outer axis, inner kept
  }
}

TEST(Reductions, OutputShapesDropOrKeepReducedAxes) {
  EXPECT_EQ(OutputShape("sum", {{"axis", "(0, 2)"}}, {Shape{2, 3, 4}}), (Shape{3}));
  EXPECT_EQ(OutputShape("mean", {{"axis", "(-1,)"}, {"keepdims", "1"}}, {Shape{2, 3, 4}}),
            (Shape{2, 3, 1}));
  EXPECT_EQ(OutputShape("max", {}, {Shape{2, 3, 4}}), Shape());
  EXPECT_EQ(OutputShape("sum", {{"keepdims", "true"}}, {Shape{2, 3}}), (Shape{1, 1}));
}

// dx for dy = 1 everywhere, from the gradient rule, in float32.
std::vector<float> MaxGradient(const std::vector<float>& x, const Shape& shape,
                               const AttrMap& attrs) {
  const Op& op = GetOp("max");
  const Attrs parsed = ParseAttrs(op, attrs);
  NDArray data = NDArray::FromVector(x, shape, TestDevice());
  NDArray y = Invoke(op, parsed, {data})[0];
  NDArray dy(y.shape(), TestDevice());
  dy.Fill(1);
  NDArray dx(shape, TestDevice());
  InvokeBackward(op, parsed, {data}, {y}, {dy}, {dx}, {OpReq::kWrite});
  return dx.ToVector<float>();
}

TEST(Reductions, MaxGradientGoesToTheFirstMaximum) {
  const std::vector<float> x = {1, 3, 3, 2, 3, 0};  // rows (1, 3, 3) and (2, 3, 0)
  EXPECT_EQ(MaxGradient(x, Shape{2, 3}, {{"axis", "1"}}), (std::vector<float>{0, 1, 0, 0, 1, 0}));
  EXPECT_EQ(MaxGradient(x, Shape{2, 3}, {{"axis", "0"}}), (std::vector<float>{0, 1, 1, 1, 0, 0}));
  EXPECT_EQ(MaxGradient(x, Shape{2, 3}, {}), (std::vector<float>{0, 1, 0, 0, 0, 0}));
}

TEST(Reductions, BadAxesSayWhatWasExpected) {
  ExpectOpError("sum", {{"axis", "2"}}, {Shape{2, 3}},
                {"sum: axis 2 is out of range for input (2, 3)", "[-2, 1]"});
  ExpectOpError("mean", {{"axis", "(-3,)"}}, {Shape{2, 3}},
                {"mean: axis -3 is out of range", "[-2, 1]"});
  ExpectOpError("max", {{"axis", "(1, -1)"}}, {Shape{2, 3}},
                {"max: axis 1 appears twice", "(1, -1)"});
  ExpectOpError("max", {{"axis", "1"}}, {Shape{2, 0}},
                {"max: expected reduced axes with at least one element", "(2, 0)"});
  ExpectOpError("sum", {{"keepdims", "maybe"}}, {Shape{2}},
                {"'sum'", "'keepdims'", "found 'maybe'"});
}

// ---- shape ops ----

// A pure reshape keeps the row-major order: the reference is the identity.
OpCase SameValues(const std::string& op, const AttrMap& attrs, const std::vector<Shape>& inputs) {
  OpCase c{op, attrs, inputs, [](const Inputs& x) { return Outputs{x[0]}; }};
  c.name = op + " " + inputs[0].ToString();
  for (const auto& [k, v] : attrs) c.name += " " + k + "=" + v;
  return c;
}

TEST(ShapeOps, ReshapeCopiesAxesForZeroAndInfersMinusOne) {
  const Shape in{2, 3, 4};
  const std::vector<std::pair<std::string, Shape>> cases = {
      {"(0, -1)", Shape{2, 12}},     {"(4, 0, -1)", Shape{4, 3, 2}},
      {"(-1,)", Shape{24}},          {"(3, 2, 2, 2)", Shape{3, 2, 2, 2}},
      {"(0, 0, 0)", Shape{2, 3, 4}}, {"(-1, 0, 1, 1)", Shape{8, 3, 1, 1}},
  };
  for (const auto& [target, want] : cases) {
    EXPECT_EQ(OutputShape("reshape", {{"shape", target}}, {in}), want) << target;
    RunOpCase(SameValues("reshape", {{"shape", target}}, {in}));
  }
}

TEST(ShapeOps, ExpandDimsInsertsAnAxisAnywhere) {
  const Shape in{2, 3};
  const std::vector<std::pair<std::string, Shape>> cases = {
      {"0", Shape{1, 2, 3}},  {"1", Shape{2, 1, 3}},  {"2", Shape{2, 3, 1}},
      {"-1", Shape{2, 3, 1}}, {"-3", Shape{1, 2, 3}},
  };
  for (const auto& [axis, want] : cases) {
    EXPECT_EQ(OutputShape("expand_dims", {{"axis", axis}}, {in}), want) << axis;
    RunOpCase(SameValues("expand_dims", {{"axis", axis}}, {in}));
  }
}

TEST(ShapeOps, FlattenKeepsTheFirstAxis) {
  EXPECT_EQ(OutputShape("flatten", {}, {Shape{2, 3, 4}}), (Shape{2, 12}));
  EXPECT_EQ(OutputShape("flatten", {}, {Shape{5}}), (Shape{5, 1}));
  EXPECT_EQ(OutputShape("flatten", {}, {Shape{0, 3}}), (Shape{0, 3}));
  RunOpCase(SameValues("flatten", {}, {Shape{2, 3, 4}}));
  // An empty input whose other axes' product overflows (a fuzz finding: fuzz/regressions/op_attrs).
  try {
    OutputShape("flatten", {}, {Shape{0, 3, 48888, int64_t{2049638230412172401}}});
    ADD_FAILURE() << "flatten accepted axes whose product overflows";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more elements than a 64-bit count holds"),
              std::string::npos)
        << e.what();
  }
}

TEST(ShapeOps, ReshapeLikeTakesTheShapeOfItsSecondInput) {
  EXPECT_EQ(OutputShape("reshape_like", {}, {Shape{2, 6}, Shape{3, 4}}), (Shape{3, 4}));
  OpCase c = SameValues("reshape_like", {}, {Shape{2, 6}, Shape{3, 4}});
  c.no_gradient_inputs = {1};  // read only for its shape
  RunOpCase(c);
}

TEST(ShapeOps, ReshapeDimsMultipliesExtentsOfItsInputs) {
  // (T * B, 4) -> (T, B, 4) with T from axis 0 of input 1 and B from axis 1 of input 2
  const AttrMap attrs = {{"shape", "(in1[0], in2[1], 4)"}};
  const std::vector<Shape> in = {Shape{6, 4}, Shape{3, 7}, Shape{5, 2}};
  EXPECT_EQ(OutputShape("reshape_dims", attrs, in), (Shape{3, 2, 4}));
  EXPECT_EQ(OutputShape("reshape_dims", {{"shape", "(2*in0[0], 2)"}}, {Shape{6, 4}}),
            (Shape{12, 2}));
  OpCase c = SameValues("reshape_dims", attrs, in);
  c.no_gradient_inputs = {1, 2};  // read only for their shapes
  RunOpCase(c);
}

TEST(ShapeOps, ReshapeDimsSaysWhatItExpected) {
  ExpectOpError("reshape_dims", {{"shape", "(in1[0], 5)"}}, {Shape{6, 4}, Shape{3}},
                {"reshape_dims", "cannot reshape", "(3, 5)"});
  ExpectOpError("reshape_dims", {{"shape", "(in1[2], 8)"}}, {Shape{6, 4}, Shape{3}},
                {"axis 2 of input 1"});
  ExpectOpError("reshape_dims", {{"shape", "(x1[0], 8)"}}, {Shape{6, 4}, Shape{3}},
                {"'shape'", "inK[A]", "'x1[0]'"});
}

TEST(ShapeOps, CopiesHaveNoEffectsAndMayRunInPlace) {
  for (const char* name : {"reshape", "reshape_dims", "expand_dims", "flatten", "reshape_like"}) {
    const Op& op = GetOp(name);
    EXPECT_EQ(op.inplace, (std::vector<std::pair<int, int>>{{0, 0}})) << name;
    EXPECT_FALSE(op.HasEffects()) << name;
  }
  // Writing in place onto its own input leaves the values as they are.
  NDArray x = NDArray::FromVector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3}, TestDevice());
  NDArray y =
      Invoke("reshape", {x}, {{"shape", "(3, -1)"}}, {.outputs = {x.Reshape(Shape{3, 2})}})[0];
  EXPECT_EQ(y.ToVector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

// y[c] = x[d] where d[axes[k]] = c[k].
OpCase TransposeCase(const Shape& in, const std::vector<int>& axes) {
  const int n = in.ndim();
  std::vector<int> perm(n);
  for (int k = 0; k < n; ++k) perm[k] = axes.empty() ? n - 1 - k : (axes[k] + n) % n;
  Shape out;
  for (int k = 0; k < n; ++k) out.PushBack(in[perm[k]]);
  OpCase c{"transpose", {}, {in}, [in, out, perm](const Inputs& x) {
             Values y(out.Size());
             for (int64_t o = 0; o < out.Size(); ++o) {
               const std::vector<int64_t> at = Coords(o, out);
               std::vector<int64_t> d(at.size());
               for (size_t k = 0; k < at.size(); ++k) d[perm[k]] = at[k];
               y[o] = x[0][Index(d, in)];
             }
             return Outputs{y};
           }};
  if (!axes.empty()) c.attrs["axes"] = Tuple(axes);
  c.name = "transpose " + in.ToString() + " axes=" + Tuple(axes);
  return c;
}

TEST(ShapeOps, TransposePermutesAxes) {
  EXPECT_EQ(OutputShape("transpose", {{"axes", "(1, 2, 0)"}}, {Shape{2, 3, 4}}), (Shape{3, 4, 2}));
  RunOpCase(TransposeCase(Shape{2, 3, 4}, {1, 2, 0}));
  RunOpCase(TransposeCase(Shape{2, 3, 4}, {2, 0, 1}));
  RunOpCase(TransposeCase(Shape{2, 3, 4}, {-1, 0, -2}));
  RunOpCase(TransposeCase(Shape{2, 3, 4}, {}));  // reversed
  RunOpCase(TransposeCase(Shape{3, 5}, {}));
  // channels_last.h's pair (tiled matrix transposes), and six axes (row gathers)
  RunOpCase(TransposeCase(Shape{2, 3, 4, 5}, {0, 2, 3, 1}));
  RunOpCase(TransposeCase(Shape{2, 4, 5, 3}, {0, 3, 1, 2}));
  RunOpCase(TransposeCase(Shape{2, 1, 3, 2, 2, 3}, {5, 0, 3, 1, 4, 2}));
}

// _strided_copy of x (`in`) along (walk, stride) from offset, into `shape`: the reference walks
// the walk's positions in row-major order.
OpCase StridedCopyCase(const Shape& in, const Shape& shape, const std::vector<int64_t>& walk,
                       const std::vector<int64_t>& stride, int64_t offset) {
  Shape w;
  for (int64_t d : walk) w.PushBack(d);
  OpCase c{"_strided_copy",
           {{"shape", shape.ToString()},
            {"walk", Tuple(walk)},
            {"stride", Tuple(stride)},
            {"offset", std::to_string(offset)}},
           {in},
           [w, stride, offset](const Inputs& x) {
             Values y(w.Size());
             for (int64_t o = 0; o < w.Size(); ++o) {
               const std::vector<int64_t> at = Coords(o, w);
               int64_t from = offset;
               for (size_t k = 0; k < at.size(); ++k) from += at[k] * stride[k];
               y[o] = x[0][from];
             }
             return Outputs{y};
           }};
  c.check_gradient = false;  // inference only (passes/compose_moves.h makes it)
  c.name = "_strided_copy walk=" + w.ToString() + " stride=" + Tuple(stride);
  return c;
}

// The heads of a packed projection (T 3, B 2, 3 x H 2 x D 4) read as k of (B, H, T, D), shaped
// (B*H, T, D); a walk whose rows are columns (a transpose's); a single element; the whole input.
TEST(ShapeOps, StridedCopyReadsAnyWalk) {
  RunOpCase(StridedCopyCase(Shape{3, 2, 24}, Shape{4, 3, 4}, {2, 2, 3, 4}, {24, 4, 48, 1}, 8));
  RunOpCase(StridedCopyCase(Shape{5, 6}, Shape{3, 5}, {3, 5}, {1, 6}, 2));
  RunOpCase(StridedCopyCase(Shape{5, 6}, Shape{1}, {}, {}, 29));
  RunOpCase(StridedCopyCase(Shape{2, 3, 4}, Shape{24}, {24}, {1}, 0));
  ExpectOpError("_strided_copy", {{"shape", "(4,)"}, {"walk", "(2, 3)"}, {"stride", "(3, 1)"}},
                {Shape{2, 3}}, {"_strided_copy", "as many elements", "(4,)", "(2, 3)"});
  ExpectOpError("_strided_copy",
                {{"shape", "(2, 3)"}, {"walk", "(2, 3)"}, {"stride", "(3, 1)"}, {"offset", "1"}},
                {Shape{2, 3}}, {"reads past the input (2, 3) (6 elements)", "offset=1"});
  ExpectOpError("_strided_copy", {{"shape", "(2,)"}, {"walk", "(2,)"}, {"stride", "(1, 1)"}},
                {Shape{2, 3}}, {"one stride >= 0 per extent", "stride=(1, 1)"});
  ExpectOpError("_strided_copy", {{"shape", "(2,)"}, {"walk", "(2,)"}, {"stride", "(-1,)"}},
                {Shape{2, 3}}, {"_strided_copy", "stride=(-1,)"});
}

TEST(ShapeOps, DataMovementWorksOnIntegers) {
  NDArray x =
      NDArray::FromVector(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, Shape{2, 3}, TestDevice());
  EXPECT_EQ(Invoke("transpose", {x})[0].ToVector<int32_t>(),
            (std::vector<int32_t>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(Invoke("slice", {x}, {{"begin", "(0, 1)"}, {"end", "(2, 3)"}})[0].ToVector<int32_t>(),
            (std::vector<int32_t>{2, 3, 5, 6}));
  EXPECT_EQ(
      Invoke("concat", {x, x}, {{"num_args", "2"}, {"dim", "0"}})[0].ToVector<int32_t>().size(),
      12u);
  EXPECT_EQ(
      Invoke("_strided_copy", {x},
             {{"shape", "(2, 2)"}, {"walk", "(2, 2)"}, {"stride", "(1, 3)"}, {"offset", "1"}})[0]
          .ToVector<int32_t>(),
      (std::vector<int32_t>{2, 5, 3, 6}));
}

TEST(ShapeOps, BadInputsSayWhatWasExpected) {
  ExpectOpError("reshape", {{"shape", "(4, -1)"}}, {Shape{2, 3}},
                {"reshape: cannot reshape (2, 3) (6 elements) into (4, -1)"});
  ExpectOpError("reshape", {{"shape", "(5,)"}}, {Shape{2, 3}},
                {"cannot reshape (2, 3) (6 elements) into (5,)"});
  ExpectOpError("reshape", {{"shape", "(0, 0, 0)"}}, {Shape{2, 3}},
                {"cannot reshape (2, 3)", "(0, 0, 0)"});
  ExpectOpError("reshape", {{"shape", "(-1, -1)"}}, {Shape{2, 3}},
                {"'reshape'", "'shape'", "at most one -1", "(-1, -1)"});
  ExpectOpError("reshape", {{"shape", "(-2, 3)"}}, {Shape{2, 3}},
                {"'reshape'", "'shape'", "(-2, 3)"});
  ExpectOpError("expand_dims", {{"axis", "3"}}, {Shape{2, 3}},
                {"expand_dims: axis 3 is out of range", "[-3, 2]"});
  ExpectOpError("expand_dims", {{"axis", "-4"}}, {Shape{2, 3}},
                {"expand_dims: axis -4 is out of range"});
  ExpectOpError("flatten", {}, {Shape{}},
                {"flatten: expected an input with at least 1 axis, found ()"});
  ExpectOpError("transpose", {{"axes", "(0, 0, 1)"}}, {Shape{2, 3, 4}},
                {"'transpose'", "permutation", "(0, 0, 1)"});
  ExpectOpError("transpose", {{"axes", "(1, 0)"}}, {Shape{2, 3, 4}},
                {"transpose", "(2, 3, 4)", "axes=(1, 0)"});
  ExpectOpError("reshape_like", {}, {Shape{2, 3}, Shape{4}},
                {"reshape_like: cannot reshape (2, 3) (6 elements) like (4,)"});
}

// ---- concat and slice ----

// Walks the output and finds, along `axis`, which input each element comes from.
OpCase ConcatCase(const std::vector<Shape>& parts, int dim) {
  const int axis = dim < 0 ? dim + parts[0].ndim() : dim;
  Shape out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) out[axis] += parts[i][axis];
  OpCase c{"concat",
           {{"num_args", std::to_string(parts.size())}, {"dim", std::to_string(dim)}},
           parts,
           [parts, out, axis](const Inputs& x) {
             Values y(out.Size());
             for (int64_t o = 0; o < out.Size(); ++o) {
               std::vector<int64_t> at = Coords(o, out);
               size_t i = 0;
               while (at[axis] >= parts[i][axis]) at[axis] -= parts[i++][axis];
               y[o] = x[i][Index(at, parts[i])];
             }
             return Outputs{y};
           }};
  c.name = "concat dim=" + std::to_string(dim) + " of " + std::to_string(parts.size()) + " inputs";
  return c;
}

TEST(ConcatSlice, ConcatJoinsAlongDim) {
  RunOpCase(ConcatCase({Shape{2, 3}, Shape{2, 1}, Shape{2, 2}}, 1));
  RunOpCase(ConcatCase({Shape{1, 3}, Shape{2, 3}, Shape{3, 3}}, 0));
  RunOpCase(ConcatCase({Shape{2, 2, 3}, Shape{2, 2, 1}, Shape{2, 2, 2}}, -1));
  RunOpCase(ConcatCase({Shape{2, 1, 3}, Shape{2, 4, 3}, Shape{2, 2, 3}}, 1));
  EXPECT_EQ(OutputShape("concat", {{"num_args", "3"}}, {Shape{2, 3}, Shape{2, 1}, Shape{2, 2}}),
            (Shape{2, 6}));
}

// y[c] = x[c + begin], begin 0 on the axes not given; `axes` as slice's (empty: the leading ones).
OpCase SliceCase(const Shape& in, const std::vector<int>& begin, const std::vector<int>& end,
                 const std::vector<int>& axes = {}) {
  std::vector<int64_t> b(in.ndim(), 0);
  Shape out = in;
  for (size_t k = 0; k < begin.size(); ++k) {
    const int a = axes.empty() ? static_cast<int>(k) : (axes[k] + in.ndim()) % in.ndim();
    b[a] = begin[k] < 0 ? begin[k] + in[a] : begin[k];
    out[a] = (end[k] < 0 ? end[k] + in[a] : end[k]) - b[a];
  }
  AttrMap attrs = {{"begin", Tuple(begin)}, {"end", Tuple(end)}};
  if (!axes.empty()) attrs["axes"] = Tuple(axes);
  OpCase c{"slice", attrs, {in}, [in, out, b](const Inputs& x) {
             Values y(out.Size());
             for (int64_t o = 0; o < out.Size(); ++o) {
               std::vector<int64_t> at = Coords(o, out);
               for (size_t a = 0; a < at.size(); ++a) at[a] += b[a];
               y[o] = x[0][Index(at, in)];
             }
             return Outputs{y};
           }};
  c.name =
      "slice " + in.ToString() + " [" + Tuple(begin) + ", " + Tuple(end) + ") axes " + Tuple(axes);
  return c;
}

TEST(ConcatSlice, SliceTakesABoxWithNegativeIndices) {
  EXPECT_EQ(OutputShape("slice", {{"begin", "(1, -3)"}, {"end", "(3, -1)"}}, {Shape{3, 4, 5}}),
            (Shape{2, 2, 5}));
  RunOpCase(SliceCase(Shape{3, 4, 5}, {1, -3}, {3, -1}));
  RunOpCase(SliceCase(Shape{3, 4, 5}, {-2}, {3}));
  RunOpCase(SliceCase(Shape{3, 4, 5}, {0, 1, 2}, {3, 4, 4}));
  RunOpCase(SliceCase(Shape{4, 6}, {-4, 0}, {-1, 6}));
}

TEST(ConcatSlice, SliceTakesTheAxesItNames) {
  EXPECT_EQ(OutputShape("slice", {{"begin", "(1,)"}, {"end", "(3,)"}, {"axes", "(-1,)"}},
                        {Shape{3, 4, 5}}),
            (Shape{3, 4, 2}));
  RunOpCase(SliceCase(Shape{3, 4, 5}, {1}, {3}, {-1}));
  RunOpCase(SliceCase(Shape{3, 4, 5}, {-2, 1}, {5, 2}, {2, 0}));
  ExpectOpError("slice", {{"begin", "(0, 1)"}, {"end", "(1, 2)"}, {"axes", "(1, -1)"}},
                {Shape{3, 4}}, {"slice: axis 1", "each axis sliced once"});
  ExpectOpError("slice", {{"begin", "(0,)"}, {"end", "(1,)"}, {"axes", "(0, 1)"}}, {Shape{3, 4}},
                {"'axes'", "one axis per begin/end entry"});
}

TEST(ConcatSlice, BadInputsSayWhatWasExpected) {
  ExpectOpError(
      "concat", {{"num_args", "2"}}, {Shape{2, 3}, Shape{3, 3}},
      {"concat: expected input 1 to match input 0 (2, 3) on every axis but 1, found (3, 3)"});
  ExpectOpError("concat", {{"num_args", "2"}}, {Shape{2, 3}, Shape{2, 3, 1}},
                {"concat: expected input 1", "(2, 3, 1)"});
  ExpectOpError("concat", {{"num_args", "2"}, {"dim", "2"}}, {Shape{2, 3}, Shape{2, 3}},
                {"concat: axis 2 is out of range"});
  ExpectOpError("concat", {{"num_args", "3"}}, {Shape{2, 3}, Shape{2, 3}},
                {"'concat'", "expected 3 input(s), found 2"});
  ExpectOpError(
      "slice", {{"begin", "(0,)"}, {"end", "(5,)"}}, {Shape{3, 4}},
      {"slice: axis 0 of input (3, 4)", "-3 <= begin, end <= 3", "found begin 0 and end 5"});
  ExpectOpError("slice", {{"begin", "(0, -5)"}, {"end", "(1, 2)"}}, {Shape{3, 4}},
                {"slice: axis 1", "found begin -5"});
  ExpectOpError("slice", {{"begin", "(2,)"}, {"end", "(1,)"}}, {Shape{3, 4}},
                {"slice: axis 0", "begin <= end"});
  ExpectOpError("slice", {{"begin", "(0, 0, 0)"}, {"end", "(1, 1, 1)"}}, {Shape{3, 4}},
                {"slice: expected at most one"});
  ExpectOpError("slice", {{"begin", "(0, 0)"}, {"end", "(1,)"}}, {Shape{3, 4}},
                {"'slice'", "begin=(0, 0)", "end=(1,)"});
}

// ---- split ----

// Part p of n along `axis`: y_p[c] = x[c with c[axis] + p * extent / n] (squeezed: the axis
// inserted back, at 0).
OpCase SplitCase(const Shape& in, int n, int axis, bool squeeze) {
  const int ax = axis < 0 ? axis + in.ndim() : axis;
  Shape part = in;
  part[ax] /= n;
  OpCase c{"split",
           {{"num_outputs", std::to_string(n)},
            {"axis", std::to_string(axis)},
            {"squeeze_axis", squeeze ? "1" : "0"}},
           {in},
           [in, part, n, ax](const Inputs& x) {
             Outputs ys;
             for (int p = 0; p < n; ++p) {
               Values y(part.Size());
               for (int64_t o = 0; o < part.Size(); ++o) {
                 std::vector<int64_t> at = Coords(o, part);
                 at[ax] += p * part[ax];
                 y[o] = x[0][Index(at, in)];
               }
               ys.push_back(y);
             }
             return ys;
           }};
  c.name = "split " + in.ToString() + " into " + std::to_string(n) + " along " +
           std::to_string(axis) + (squeeze ? " squeezed" : "");
  return c;
}

TEST(Split, CutsIntoEqualPartsAlongAnAxis) {
  RunOpCase(SplitCase(Shape{2, 6}, 3, 1, false));
  RunOpCase(SplitCase(Shape{4, 3}, 2, 0, false));
  RunOpCase(SplitCase(Shape{2, 5, 9}, 3, -1, false));  // packed QKV: (B, T, 3 * C)
  RunOpCase(SplitCase(Shape{2, 3, 4}, 3, 1, true));
  EXPECT_EQ(OutputShape("split", {{"num_outputs", "3"}, {"axis", "1"}, {"squeeze_axis", "1"}},
                        {Shape{2, 3, 4}}),
            (Shape{2, 4}));
}

// An output without a gradient gives zeros in its part of the input's gradient.
TEST(Split, AnOutputWithoutAGradientContributesZeros) {
  const Symbol parts =
      Symbol::Op("split", {Symbol::Variable("x")}, {{"num_outputs", "2"}, {"axis", "0"}});
  Executor::ArrayMap args = {
      {"x", NDArray::FromVector(std::vector<float>{1, 2, 3, 4}, Shape{2, 2}, TestDevice())}};
  Executor::ArrayMap grads = {{"x", NDArray(Shape{2, 2}, TestDevice())}};
  auto exec = Executor::Bind(parts[1], TestDevice(), args, grads, {{"x", GradReq::kWrite}});
  exec->Forward(/*is_train=*/true);
  exec->Backward({NDArray::FromVector(std::vector<float>{5, 6}, Shape{1, 2}, TestDevice())});
  EXPECT_EQ(grads.at("x").Copy(Device::Cpu()).ToVector<float>(), (std::vector<float>{0, 0, 5, 6}));
}

TEST(Split, BadInputsSayWhatWasExpected) {
  ExpectOpError("split", {{"num_outputs", "3"}, {"axis", "1"}}, {Shape{2, 7}},
                {"split: axis 1 of data (2, 7) has extent 7", "num_outputs=3 equal parts"});
  ExpectOpError("split", {{"num_outputs", "2"}, {"axis", "1"}, {"squeeze_axis", "1"}},
                {Shape{2, 4}}, {"split: squeeze_axis needs parts of extent 1", "found 2"});
  ExpectOpError("split", {{"num_outputs", "2"}, {"axis", "2"}}, {Shape{2, 4}},
                {"split: axis 2 is out of range"});
  ExpectOpError("split", {{"num_outputs", "0"}}, {Shape{2, 4}}, {"'num_outputs'", "found '0'"});
}

// ---- take ----

// y[o, j, i] = x[o, idx[j], i] around `axis`, the indices in input 1 (float, integer-valued).
OpCase TakeCase(const Shape& a, const Shape& indices, int axis, int classes) {
  const int ax = axis < 0 ? axis + a.ndim() : axis;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < ax; ++d) outer *= a[d];
  for (int d = ax + 1; d < a.ndim(); ++d) inner *= a[d];
  const int64_t n = a[ax], k = indices.Size();
  OpCase c{"take", {{"axis", std::to_string(axis)}}, {a, indices}, [=](const Inputs& x) {
             Values y;
             for (int64_t o = 0; o < outer; ++o) {
               for (int64_t j = 0; j < k; ++j) {
                 for (int64_t i = 0; i < inner; ++i)
                   y.push_back(x[0][(o * n + static_cast<int64_t>(x[1][j])) * inner + i]);
               }
             }
             return Outputs{y};
           }};
  c.init = ClassIndices(1, classes);
  c.no_gradient_inputs = {1};
  c.name = "take " + a.ToString() + " by " + indices.ToString() + " along " + std::to_string(axis);
  return c;
}

TEST(Take, GathersAlongAnAxisAndScatterAddsItsGradient) {
  RunOpCase(TakeCase(Shape{5, 3}, Shape{2, 3}, 0, 5));  // repeated rows: the gradient sums them
  RunOpCase(TakeCase(Shape{2, 4, 3}, Shape{5}, 1, 4));
  RunOpCase(TakeCase(Shape{3, 4}, Shape{6}, -1, 4));
  EXPECT_EQ(OutputShape("take", {{"axis", "1"}}, {Shape{2, 4, 3}, Shape{5, 2}}),
            (Shape{2, 5, 2, 3}));
}

// int32 and int64 indices give what float ones give.
TEST(Take, TakesIntegerIndices) {
  const NDArray a =
      NDArray::FromVector(std::vector<float>{0, 1, 2, 3, 4, 5}, Shape{3, 2}, TestDevice());
  for (DType t : {DType::kInt32, DType::kInt64}) {
    const NDArray idx = Invoke("Cast", {NDArray::FromVector(std::vector<float>{2, 0, 2}, Shape{3})},
                               {{"dtype", std::string(DTypeName(t))}})[0]
                            .Copy(TestDevice());
    const NDArray y = Invoke("take", {a, idx}, {{"axis", "0"}})[0];
    EXPECT_EQ(y.Copy(Device::Cpu()).ToVector<float>(), (std::vector<float>{4, 5, 0, 1, 4, 5})) << t;
  }
}

TEST(Take, AnIndexOutOfRangeFailsAtWaitToRead) {
  const NDArray a(Shape{3, 2}, TestDevice());
  for (float bad : {3.0f, -1.0f}) {
    const NDArray idx = NDArray::FromVector(std::vector<float>{0, bad, 1}, Shape{3}, TestDevice());
    NDArray out;
    ASSERT_NO_THROW(out = Invoke("take", {a, idx}, {{"axis", "0"}})[0]);
    std::string message = "<no error>";
    try {
      out.WaitToRead();
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("take: index " + FloatAttr(bad) +
                           " at position 1 of indices is out "
                           "of range: expected 0 <= index < 3"),
              std::string::npos)
        << message;
  }
}

TEST(Take, BadInputsSayWhatWasExpected) {
  ExpectOpError("take", {{"axis", "2"}}, {Shape{3, 2}, Shape{4}}, {"take: axis 2 is out of range"});
  ExpectOpError("take", {}, {Shape{3, 2}}, {"'take'", "expected 2 input(s), found 1"});
}

// ---- write_at ----

// data (outer, n, inner) around `axis` with value (outer, k, inner) written from `index` on; the
// index is input 2 (one element).
OpCase WriteAtCase(const Shape& data, const Shape& value, int axis, int index) {
  const int ax = axis < 0 ? axis + data.ndim() : axis;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < ax; ++d) outer *= data[d];
  for (int d = ax + 1; d < data.ndim(); ++d) inner *= data[d];
  const int64_t n = data[ax], k = value[ax];
  OpCase c{
      "write_at", {{"axis", std::to_string(axis)}}, {data, value, Shape{1}}, [=](const Inputs& x) {
        Values y = x[0];
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t j = 0; j < k; ++j) {
            for (int64_t i = 0; i < inner; ++i)
              y[(o * n + index + j) * inner + i] = x[1][(o * k + j) * inner + i];
          }
        }
        return Outputs{y};
      }};
  c.init = [index](int i, Values& v) {
    if (i == 2) v = {static_cast<double>(index)};
    if (i < 2) v = Uniform(static_cast<int64_t>(v.size()), 7 + i);
  };
  c.check_gradient = false;  // it updates state: no gradient rule
  c.name = "write_at " + value.ToString() + " into " + data.ToString() + " at " +
           std::to_string(index) + " along " + std::to_string(axis);
  return c;
}

TEST(WriteAt, WritesASlabAtAnIndexReadAtRunTime) {
  RunOpCase(WriteAtCase(Shape{2, 3, 5, 4}, Shape{2, 3, 1, 4}, 2, 3));  // a cache's one position
  RunOpCase(WriteAtCase(Shape{2, 3, 5, 4}, Shape{2, 3, 2, 4}, 2, 3));  // the last two
  RunOpCase(WriteAtCase(Shape{4, 3}, Shape{4, 3}, 0, 0));              // all of it
  RunOpCase(WriteAtCase(Shape{3, 6}, Shape{3, 2}, -1, 1));
}

// The op updates its data input in place (what a cache needs), integer indices included, and an
// output of memory of its own gets the updated data.
TEST(WriteAt, UpdatesItsDataInPlace) {
  const NDArray data =
      NDArray::FromVector(std::vector<float>{0, 1, 2, 3, 4, 5}, Shape{2, 3}, TestDevice());
  const NDArray value = NDArray::FromVector(std::vector<float>{7, 8}, Shape{2, 1}, TestDevice());
  const NDArray index = Invoke("Cast", {NDArray::FromVector(std::vector<float>{2}, Shape{1})},
                               {{"dtype", "int32"}})[0]
                            .Copy(TestDevice());
  const NDArray out = Invoke("write_at", {data, value, index}, {{"axis", "1"}})[0];
  const std::vector<float> want = {0, 1, 7, 3, 4, 8};
  EXPECT_EQ(data.Copy(Device::Cpu()).ToVector<float>(), want);
  EXPECT_EQ(out.Copy(Device::Cpu()).ToVector<float>(), want);
  Invoke("write_at", {data, value, index}, {{"axis", "1"}}, {.outputs = {data}});  // in place
  EXPECT_EQ(data.Copy(Device::Cpu()).ToVector<float>(), want);
}

TEST(WriteAt, AnIndexOutOfRangeFailsAtWaitToRead) {
  for (float bad : {4.0f, -1.0f}) {
    const NDArray data(Shape{5, 2}, TestDevice()), value(Shape{2, 2}, TestDevice());
    data.Fill(1);
    value.Fill(2);
    const NDArray index = NDArray::FromVector(std::vector<float>{bad}, Shape{1}, TestDevice());
    NDArray out;
    ASSERT_NO_THROW(out = Invoke("write_at", {data, value, index}, {})[0]);
    std::string message = "<no error>";
    try {
      out.WaitToRead();
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("write_at: index " + FloatAttr(bad) +
                           " is out of range: expected 0 <= index <= 3"),
              std::string::npos)
        << message;
    EXPECT_THROW(data.WaitToRead(), Error) << "data, which the op writes, carries the error too";
  }
}

TEST(WriteAt, BadInputsSayWhatWasExpected) {
  ExpectOpError("write_at", {{"axis", "1"}}, {Shape{2, 3}, Shape{2, 4}, Shape{1}},
                {"write_at: expected value of data's shape (2, 3) but on axis 1, at most 3 there; "
                 "found (2, 4)"});
  ExpectOpError("write_at", {}, {Shape{2, 3}, Shape{1, 3}, Shape{2}},
                {"write_at: expected one index, found the shape (2,)"});
}

// ---- Embedding ----

TEST(Embedding, PicksRowsOfWeight) {
  OpCase c{"Embedding",
           {{"input_dim", "5"}, {"output_dim", "4"}},
           {Shape{2, 3}, Shape{5, 4}},
           [](const Inputs& x) {
             Values y;
             for (double index : x[0]) {
               for (int col = 0; col < 4; ++col)
                 y.push_back(x[1][static_cast<int>(index) * 4 + col]);
             }
             return Outputs{y};
           }};
  c.init = ClassIndices(0, 5);  // 3, 0, 2, 4, 1, 3: row 3 twice, so its gradient sums two rows
  c.no_gradient_inputs = {0};
  RunOpCase(c);
  EXPECT_EQ(OutputShape("Embedding", c.attrs, c.input_shapes), (Shape{2, 3, 4}));
}

// Indices of every index dtype pick rows of weights of every weight dtype, forward and backward
// (repeated indices sum their rows), the output and gradient in the weight's dtype: a bfloat16
// model looks up token ids past 256 from float32 or integer indices (bfloat16 ids stop at 256).
TEST(Embedding, IndicesOfAnyIndexDtypePickWeightsOfAnyFloatDtype) {
  const int64_t rows = 1000, dim = 3;
  Values w(rows * dim);
  for (size_t e = 0; e < w.size(); ++e) w[e] = static_cast<double>(e % 61) / 8 - 3;  // bf16-exact
  for (DType index :
       {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32, DType::kInt64}) {
    // ids past 256 where the dtype holds them; one repeated, so its gradient sums two rows
    const Values ids = index == DType::kBFloat16 ? Values{3, 255, 3, 0} : Values{999, 257, 999, 0};
    for (DType weight : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
      const std::string what =
          std::string(DTypeName(index)) + " ids, " + std::string(DTypeName(weight)) + " weights";
      const NDArray data = ArrayOf(ids, Shape{4}, index), wa = ArrayOf(w, Shape{rows, dim}, weight);
      const AttrMap attrs = {{"input_dim", std::to_string(rows)}, {"output_dim", "3"}};
      const NDArray y = Invoke("Embedding", {data, wa}, attrs)[0];
      EXPECT_EQ(y.dtype(), weight) << what;
      Values want, dy, dw(rows * dim, 0.0);
      for (size_t k = 0; k < ids.size(); ++k) {
        for (int64_t c = 0; c < dim; ++c) {
          want.push_back(w[static_cast<int64_t>(ids[k]) * dim + c]);
          dy.push_back(static_cast<double>(k + 1) + c * 0.5);
          dw[static_cast<int64_t>(ids[k]) * dim + c] += dy.back();
        }
      }
      ExpectNear(ValuesOf(y), want, 0, what + ": forward");
      const NDArray g =
          Invoke("_backward_Embedding", {ArrayOf(dy, Shape{4, dim}, weight), data}, attrs)[0];
      EXPECT_EQ(g.dtype(), weight) << what;
      ExpectNear(ValuesOf(g), dw, 0, what + ": backward");
    }
  }
  std::string message = "<no error>";
  try {
    Invoke("Embedding",
           {ArrayOf({1, 2}, Shape{2}, DType::kUInt8),
            ArrayOf(Values(10, 1.0), Shape{5, 2}, DType::kFloat32)},
           {{"input_dim", "5"}, {"output_dim", "2"}});
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("Embedding: expected data of float32, float64, bfloat16, float16, int32 "
                         "or int64, found uint8"),
            std::string::npos)
      << message;
}

TEST(Embedding, AnIndexOutOfRangeFailsAtWaitToRead) {
  NDArray data = NDArray::FromVector(std::vector<float>{1, 4, 7, 0}, Shape{4}, TestDevice());
  NDArray weight(Shape{5, 2}, TestDevice());
  weight.Fill(1);
  NDArray out;
  ASSERT_NO_THROW(
      out = Invoke("Embedding", {data, weight}, {{"input_dim", "5"}, {"output_dim", "2"}})[0]);
  std::string message = "<no error>";
  try {
    out.WaitToRead();
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("Embedding: index 7 at position 2 of data is out of range"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("0 <= index < 5 (input_dim)"), std::string::npos) << message;
}

TEST(Embedding, BadInputsSayWhatWasExpected) {
  ExpectOpError(
      "Embedding", {{"input_dim", "5"}, {"output_dim", "4"}}, {Shape{3}, Shape{5, 3}},
      {"Embedding: expected weight of shape (5, 4) (input_dim, output_dim), found (5, 3)"});
  ExpectOpError("Embedding", {{"input_dim", "5"}}, {Shape{3}, Shape{5, 3}},
                {"'Embedding'", "'output_dim' is required"});
  ExpectOpError("Embedding", {{"input_dim", "0"}, {"output_dim", "4"}}, {Shape{3}, Shape{0, 4}},
                {"'input_dim'", "found '0'"});
}

// ---- Dropout ----

NDArray Ramp(int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(1 + i % 7);
  return NDArray::FromVector(v, Shape{n}, TestDevice());
}

std::vector<NDArray> TrainDropout(const NDArray& x, const std::string& p) {
  return Invoke("Dropout", {x}, {{"p", p}}, {.is_train = true});
}

TEST(Dropout, ASeedGivesTheSameMaskAgain) {
  const NDArray x = Ramp(1001);
  SeedRandom(42);
  const std::vector<NDArray> a = TrainDropout(x, "0.5");
  SeedRandom(42);
  const std::vector<NDArray> b = TrainDropout(x, "0.5");
  EXPECT_EQ(a[1].ToVector<float>(), b[1].ToVector<float>());
  EXPECT_EQ(a[0].ToVector<float>(), b[0].ToVector<float>());
  SeedRandom(43);
  EXPECT_NE(TrainDropout(x, "0.5")[1].ToVector<float>(), a[1].ToVector<float>());
  EXPECT_NE(TrainDropout(x, "0.5")[1].ToVector<float>(), a[1].ToVector<float>())
      << "the next call draws anew";
}

TEST(Dropout, DropsAboutAFractionPAndScalesTheRest) {
  const int64_t n = 100000;
  const NDArray x = Ramp(n);
  SeedRandom(7);
  const std::vector<NDArray> out = TrainDropout(x, "0.3");
  const std::vector<float> in = x.ToVector<float>(), y = out[0].ToVector<float>(),
                           mask = out[1].ToVector<float>();
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (mask[i] == 0) {
      ++dropped;
      ASSERT_EQ(y[i], 0) << i;
    } else {
      ASSERT_FLOAT_EQ(mask[i], 1 / 0.7f) << i;
      ASSERT_FLOAT_EQ(y[i], in[i] / 0.7f) << i;
    }
  }
  EXPECT_NEAR(static_cast<double>(dropped) / n, 0.3, 0.01);  // about 7 standard deviations
}

TEST(Dropout, OutsideTrainingIsTheIdentity) {
  OpCase c{"Dropout", {{"p", "0.4"}}, {Shape{3, 5}}, [](const Inputs& x) {
             return Outputs{x[0]};  // the mask, all ones, is the op's own
           }};
  RunOpCase(c);  // is_train = false: forward, and the gradient out_grad * mask = out_grad
  const NDArray x = Ramp(50);
  const std::vector<NDArray> out = Invoke("Dropout", {x}, {{"p", "0.9"}});
  EXPECT_EQ(out[0].ToVector<float>(), x.ToVector<float>());
  EXPECT_EQ(out[1].ToVector<float>(), std::vector<float>(50, 1));
}

TEST(Dropout, GradientIsOutGradTimesMask) {
  const Op& op = GetOp("Dropout");
  const Attrs attrs = ParseAttrs(op, {{"p", "0.25"}});
  const NDArray x = Ramp(999);
  SeedRandom(3);
  const std::vector<NDArray> out = Invoke(op, attrs, {x}, {.is_train = true});
  NDArray dy(x.shape(), TestDevice()), mask_grad(x.shape(), TestDevice()),
      dx(x.shape(), TestDevice());
  dy.FillUniform(-1, 1);
  mask_grad.Fill(0);
  dx.Fill(0.5);
  InvokeBackward(op, attrs, {x}, out, {dy, mask_grad}, {dx}, {OpReq::kAddTo});
  const std::vector<float> g = dy.ToVector<float>(), mask = out[1].ToVector<float>(),
                           got = dx.ToVector<float>();
  int64_t zeros = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_FLOAT_EQ(got[i], 0.5f + g[i] * mask[i]) << i;
    zeros += mask[i] == 0;
  }
  EXPECT_GT(zeros, 0);
}

TEST(Dropout, BadProbabilitiesSayWhatWasExpected) {
  ExpectOpError("Dropout", {{"p", "1"}}, {Shape{4}},
                {"'Dropout'", "'p'", "expected a probability in [0, 1), found 1"});
  ExpectOpError("Dropout", {{"p", "-0.5"}}, {Shape{4}}, {"'Dropout'", "found -0.5"});
  ExpectOpError("Dropout", {{"p", "half"}}, {Shape{4}}, {"'Dropout'", "'p'", "found 'half'"});
  EXPECT_TRUE(GetOp("Dropout").IsRandom()) << "CSE must never merge two Dropouts";
}

// Runs ops_dropout_child under `env`; returns what it printed on stdout, or why it failed.
std::string RunDropoutChild(const std::string& env) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || workspace == nullptr)
    return "<not run by bazel test: no TEST_SRCDIR/TEST_WORKSPACE>";
  const std::string command = env + " timeout 60 " + std::string(srcdir) + "/" + workspace +
                              "/tests/ops_dropout_child 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "<popen failed>";
  std::string output;
  std::array<char, 4096> buf;
  while (fgets(buf.data(), buf.size(), pipe) != nullptr) output += buf.data();
  const int status = pclose(pipe);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    output += "\n<exit status " + std::to_string(status) + ">";
  return output;
}

TEST(Dropout, ASeedGivesTheSameOutputWhateverTheWorkersAndThreads) {
  if (TestDevice().is_gpu())
    GTEST_SKIP() << "CPU worker and thread counts; the GPU runs compare with the CPU";
  const std::string reference = RunDropoutChild("WEFT_CPU_WORKERS=1 WEFT_CPU_OP_THREADS=1");
  ASSERT_EQ(reference.rfind("mask", 0), 0u) << reference.substr(0, 500);
  ASSERT_EQ(reference.find("<"), std::string::npos) << reference.substr(reference.find("<"), 500);
  for (const char* env :
       {"WEFT_CPU_WORKERS=1 WEFT_CPU_OP_THREADS=3", "WEFT_CPU_WORKERS=4 WEFT_CPU_OP_THREADS=2",
        "WEFT_CPU_WORKERS=8", "WEFT_ENGINE=naive WEFT_CPU_OP_THREADS=4"}) {
    const std::string got = RunDropoutChild(env);
    size_t diff = 0;
    while (diff < got.size() && diff < reference.size() && got[diff] == reference[diff]) ++diff;
    EXPECT_TRUE(got == reference) << env << ": the output differs from character " << diff << ": '"
                                  << got.substr(diff, 200) << "' instead of '"
                                  << reference.substr(diff, 200) << "'";
  }
}

// ---- Cast and the utility ops ----

TEST(Cast, ToFloat64KeepsTheValuesAndItsGradientCastsBack) {
  OpCase c{
      "Cast", {{"dtype", "float64"}}, {Shape{3, 4}}, [](const Inputs& x) { return Outputs{x[0]}; }};
  RunOpCase(c);  // the gradient runs _backward_Cast
  EXPECT_EQ(Invoke("Cast", {NDArray(Shape{2}, TestDevice())}, {{"dtype", "float64"}})[0].dtype(),
            DType::kFloat64);
}

TEST(Cast, FromBoolReadsZeroAndOne) {  // an imported padding mask becomes where's condition
  NDArray mask(Shape{5}, TestDevice(), DType::kBool);
  const std::vector<uint8_t> bytes = {1, 0, 0, 1, 1};
  mask.SyncCopyFromHost(bytes.data(), bytes.size());
  for (const char* to : {"float32", "bfloat16", "int64"}) {
    const NDArray f = Invoke("Cast", {mask}, {{"dtype", to}})[0];
    EXPECT_EQ(Invoke("Cast", {f}, {{"dtype", "float32"}})[0].ToVector<float>(),
              (std::vector<float>{1, 0, 0, 1, 1}))
        << to;
  }
}

TEST(UtilityOps, FillsAndCopiesMatchTheirDefinitions) {
  OpCase zeros{"zeros_like", {}, {Shape{2, 3}}, [](const Inputs& x) {
                 return Outputs{Values(x[0].size(), 0.0)};
               }};
  RunOpCase(zeros);  // no gradient flows to the input: finite differences give 0 too
  OpCase ones{"ones_like", {}, {Shape{4}}, [](const Inputs& x) {
                return Outputs{Values(x[0].size(), 1.0)};
              }};
  RunOpCase(ones);
  OpCase copy{"_copy", {}, {Shape{3, 2}}, [](const Inputs& x) { return Outputs{x[0]}; }};
  RunOpCase(copy);
  OpCase stop{"stop_gradient", {}, {Shape{5}}, [](const Inputs& x) { return Outputs{x[0]}; }};
  stop.no_gradient_inputs = {0};  // by definition: its rule gives the input none
  RunOpCase(stop);
}

}  // namespace
}  // namespace weft::testing
