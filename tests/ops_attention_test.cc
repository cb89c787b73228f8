// Attention and _backward_Attention (ops/nn/attention.cc). Declarative cases against a plain
// float64 reference of softmax(scale * q k^T + mask, causal) v, each with its finite-difference
// gradient (op_test_util.h): causal or not, no mask, a full mask, a (1, 1, Tq, Tk) mask and a
// (B, 1, 1, Tk) padding mask, Tq != Tk, D != Dv, a given scale, rows with every key masked,
// shapes over several query and key tiles, and packed qkv (layout bt3hd). PyTorch's numbers
// (tests/attention_torch_cases.h, boolean masks and packed qkv among them), every backward
// request, the hidden log-sum-exp, boolean masks, packed against separate operands, bfloat16
// against float32, dropout (against a reference with the Philox mask, its keep rate, and finite
// differences with the mask fixed), and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/math/attention_dropout.h"
#include "ops/nn/attention.h"
#include "ops/op.h"
#include "storage/ndarray.h"
#include "storage/random.h"
#include "tests/attention_torch_cases.h"
#include "tests/op_test_util.h"
#include "weft/imperative.h"

namespace weft::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- The reference ----

// One call's extents and attributes.
struct Problem {
  int64_t b, h, tq, tk, d, dv;
  bool causal = false;
  double scale = 0;        // 0: the default 1 / sqrt(D)
  Shape mask;              // no axes: no mask
  bool bool_mask = false;  // the mask is uint8, 1: the key takes part; else additive
  bool packed = false;     // layout bt3hd: one input qkv (B, T, 3, H, D), out (B, T, H, D)
  double p = 0;            // dropout

  bool HasMask() const { return mask.ndim() > 0; }
  int Operands() const { return packed ? 1 : 3; }
  double Scale() const { return scale != 0 ? scale : 1 / std::sqrt(static_cast<double>(d)); }
  // The mask's element for (bi, hi, i, j), its axes aligned right and broadcast where 1.
  double MaskAt(const Values& m, int64_t bi, int64_t hi, int64_t i, int64_t j) const {
    const int64_t at[4] = {bi, hi, i, j};
    int64_t offset = 0;
    for (int a = 4 - mask.ndim(), k = 0; a < 4; ++a, ++k)
      offset = offset * mask[k] + (mask[k] == 1 ? 0 : at[a]);
    return m[offset];
  }
};

// The dropout factor of (b, h, i, j): 0 or 1 / (1 - p).
using KeepFn = std::function<double(int64_t, int64_t, int64_t, int64_t)>;

// q, k, v (B, H, T, D) row-major, from the inputs of either layout.
struct Bhtd {
  Values q, k, v;
};

Bhtd Unpacked(const Problem& p, const Inputs& in) {
  if (!p.packed) return {in[0], in[1], in[2]};
  Bhtd x{Values(p.b * p.h * p.tq * p.d), Values(p.b * p.h * p.tq * p.d),
         Values(p.b * p.h * p.tq * p.d)};
  Values* parts[3] = {&x.q, &x.k, &x.v};
  for (int64_t bi = 0; bi < p.b; ++bi)
    for (int64_t t = 0; t < p.tq; ++t)
      for (int part = 0; part < 3; ++part)
        for (int64_t hi = 0; hi < p.h; ++hi)
          for (int64_t c = 0; c < p.d; ++c)
            (*parts[part])[((bi * p.h + hi) * p.tq + t) * p.d + c] =
                in[0][(((bi * p.tq + t) * 3 + part) * p.h + hi) * p.d + c];
  return x;
}

// y (B, H, T, D) as the layout places the output.
Values OutputLayout(const Problem& p, const Values& y) {
  if (!p.packed) return y;
  Values out(y.size());
  for (int64_t bi = 0; bi < p.b; ++bi)
    for (int64_t hi = 0; hi < p.h; ++hi)
      for (int64_t t = 0; t < p.tq; ++t)
        for (int64_t c = 0; c < p.dv; ++c)
          out[((bi * p.tq + t) * p.h + hi) * p.dv + c] = y[((bi * p.h + hi) * p.tq + t) * p.dv + c];
  return out;
}

// The Tq x Tk probabilities softmax(scale * q k^T + mask, causal) of pair (bi, hi); a row with
// every key masked is 0.
Values Probabilities(const Problem& p, const Bhtd& x, const Values* mask, int64_t bi, int64_t hi) {
  const int64_t bh = bi * p.h + hi;
  Values prob(p.tq * p.tk);
  for (int64_t i = 0; i < p.tq; ++i) {
    double* s = prob.data() + i * p.tk;
    double max = -kInf;
    for (int64_t j = 0; j < p.tk; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < p.d; ++c)
        dot += x.q[(bh * p.tq + i) * p.d + c] * x.k[(bh * p.tk + j) * p.d + c];
      s[j] = p.Scale() * dot;
      const double m = mask ? p.MaskAt(*mask, bi, hi, i, j) : 0;
      if (p.bool_mask && m == 0) s[j] = -kInf;
      if (!p.bool_mask) s[j] += m;
      if (p.causal && j > i) s[j] = -kInf;
      max = std::max(max, s[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < p.tk; ++j) sum += s[j] = max == -kInf ? 0 : std::exp(s[j] - max);
    for (int64_t j = 0; j < p.tk; ++j) s[j] = sum == 0 ? 0 : s[j] / sum;
  }
  return prob;
}

// (P * keep) v per (b, h) pair, P the explicit probabilities; `keep` null: no dropout.
Values Reference(const Problem& p, const Inputs& in, const KeepFn& keep = nullptr) {
  const Bhtd x = Unpacked(p, in);
  const Values* mask = p.HasMask() ? &in[p.Operands()] : nullptr;
  Values y(p.b * p.h * p.tq * p.dv, 0.0);
  for (int64_t bi = 0; bi < p.b; ++bi) {
    for (int64_t hi = 0; hi < p.h; ++hi) {
      const int64_t bh = bi * p.h + hi;
      const Values prob = Probabilities(p, x, mask, bi, hi);
      for (int64_t i = 0; i < p.tq; ++i) {
        for (int64_t j = 0; j < p.tk; ++j) {
          const double w = prob[i * p.tk + j] * (keep ? keep(bi, hi, i, j) : 1.0);
          for (int64_t c = 0; c < p.dv; ++c)
            y[(bh * p.tq + i) * p.dv + c] += w * x.v[(bh * p.tk + j) * p.dv + c];
        }
      }
    }
  }
  return OutputLayout(p, y);
}

AttrMap AttrsOf(const Problem& p) {
  AttrMap a = {{"causal", p.causal ? "true" : "false"}};
  if (p.HasMask()) a["use_mask"] = "true";
  if (p.scale != 0) a["scale"] = std::to_string(p.scale);
  if (p.packed) a["layout"] = "bt3hd";
  if (p.p != 0) a["p"] = std::to_string(p.p);
  return a;
}

std::vector<Shape> ShapesOf(const Problem& p) {
  std::vector<Shape> s = {Shape{p.b, p.h, p.tq, p.d}, Shape{p.b, p.h, p.tk, p.d},
                          Shape{p.b, p.h, p.tk, p.dv}};
  if (p.packed) s = {Shape{p.b, p.tq, 3, p.h, p.d}};
  if (p.HasMask()) s.push_back(p.mask);
  return s;
}

// `mask_init` fills the mask (default: uniform in [-1, 1)).
OpCase AttentionCase(const std::string& name, const Problem& p,
                     std::function<void(Values&)> mask_init = nullptr) {
  OpCase c{"Attention", AttrsOf(p), ShapesOf(p),
           [p](const Inputs& in) { return Outputs{Reference(p, in)}; }};
  c.init = [mask_init, mask = p.Operands()](int i, Values& v) {
    v = Uniform(v.size(), 11 + i);
    if (i == mask && mask_init) mask_init(v);
  };
  if (p.HasMask()) c.no_gradient_inputs = {p.Operands()};
  c.tolerance = 2e-5;
  c.gradient_tolerance = 1e-6;
  c.name = "Attention " + name;
  return c;
}

// Attention has a compute on the CPU only so far: on a device without one (gpu_ops_attention_test)
// every test is skipped, saying so.
class Attention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!GetOp("Attention").On(TestDevice().type)) {
      GTEST_SKIP() << "Attention has no compute on " << TestDevice() << " yet";
    }
  }
};

// ---- Declarative cases ----

TEST_F(Attention, MatchesTheReferenceWithoutMask) {
  RunOpCase(AttentionCase("plain", {1, 2, 3, 3, 4, 4}));
  RunOpCase(AttentionCase("causal", {2, 2, 4, 4, 3, 3, true}));
  RunOpCase(AttentionCase("tq < tk, d != dv", {2, 1, 3, 5, 4, 2}));
  RunOpCase(AttentionCase("tq > tk causal", {1, 2, 5, 3, 2, 3, true}));
  RunOpCase(AttentionCase("scale 0.5", {1, 1, 3, 4, 2, 2, false, 0.5}));
}

TEST_F(Attention, MatchesTheReferenceWithMasks) {
  RunOpCase(AttentionCase("full mask", {2, 2, 3, 4, 2, 3, false, 0, Shape{2, 2, 3, 4}}));
  RunOpCase(
      AttentionCase("(1, 1, Tq, Tk) mask causal", {2, 2, 4, 4, 3, 2, true, 0, Shape{1, 1, 4, 4}}));
  // (B, 1, 1, Tk): batch 1's last two keys are padding.
  RunOpCase(
      AttentionCase("padding mask", {2, 2, 3, 5, 2, 2, false, 0, Shape{2, 1, 1, 5}}, [](Values& m) {
        for (size_t k = 0; k < m.size(); ++k) m[k] = k >= 8 ? -kInf : 0;
      }));
  RunOpCase(AttentionCase("(Tq, Tk) mask", {1, 2, 3, 4, 2, 2, false, 0, Shape{3, 4}}));
}

// Query 1's keys are all masked: its output is 0 and it adds no gradient anywhere.
TEST_F(Attention, ARowWithEveryKeyMaskedGivesZero) {
  const Problem p{1, 2, 3, 4, 2, 3, false, 0, Shape{1, 1, 3, 4}};
  RunOpCase(AttentionCase("fully masked row", p, [](Values& m) {
    for (int k = 4; k < 8; ++k) m[k] = -kInf;
  }));
  const Problem causal{1, 1, 3, 3, 2, 2, true, 0, Shape{3, 3}};
  RunOpCase(AttentionCase("fully masked first row, causal", causal, [](Values& m) {
    m[0] = -kInf;  // query 0 sees only key 0
  }));
}

// 70 queries and 100 keys: three query tiles and two key tiles, causal and not.
TEST_F(Attention, MatchesTheReferenceOverSeveralTiles) {
  RunOpCase(AttentionCase("tiles causal", {1, 1, 70, 100, 3, 2, true}));
  RunOpCase(AttentionCase("tiles padding", {2, 1, 40, 70, 2, 3, false, 0, Shape{2, 1, 1, 70}},
                          [](Values& m) {
                            for (size_t k = 0; k < m.size(); ++k) m[k] = k >= 130 ? -kInf : 0;
                          }));
}

// Packed qkv (B, T, 3, H, D): out (B, T, H, D) and d_qkv in qkv's layout.
TEST_F(Attention, MatchesTheReferenceWithPackedQkv) {
  Problem p{2, 3, 4, 4, 2, 2};
  p.packed = true;
  RunOpCase(AttentionCase("packed", p));
  Problem masked{2, 2, 5, 5, 3, 3, true, 0.4, Shape{2, 1, 5, 5}};
  masked.packed = true;
  RunOpCase(AttentionCase("packed causal masked", masked));
  Problem tiles{1, 2, 70, 70, 2, 2, true};
  tiles.packed = true;
  RunOpCase(AttentionCase("packed tiles causal", tiles));
}
// ---- Calls ----

constexpr uint64_t kSeed = 20261205;

// The mask as the problem says: uint8 (or bool, aliasing it) for a boolean mask, else `dtype`.
NDArray MaskArray(const Problem& p, const Values& m, DType dtype, DType boolean = DType::kUInt8) {
  if (!p.bool_mask) return ArrayOf(m, p.mask, dtype);
  const NDArray bytes = ArrayOf(m, p.mask, DType::kUInt8);
  return boolean == DType::kUInt8 ? bytes : bytes.Alias(p.mask, boolean);
}

std::vector<NDArray> InputArrays(const Problem& p, const Inputs& in, DType dtype,
                                 DType boolean = DType::kUInt8) {
  const std::vector<Shape> shapes = ShapesOf(p);
  std::vector<NDArray> arrays;
  for (int i = 0; i < p.Operands(); ++i) arrays.push_back(ArrayOf(in[i], shapes[i], dtype));
  if (p.HasMask()) arrays.push_back(MaskArray(p, in[p.Operands()], dtype, boolean));
  return arrays;
}

// What one call gives.
struct Result {
  Values out, lse;
  std::vector<Values> grads;  // of the operands (q, k, v, or qkv)
  std::vector<int64_t> rng;   // the dropout key output (p > 0)
};

// How to call.
struct How {
  DType dtype = DType::kFloat64;
  bool is_train = false;
  std::vector<OpReq> req = {};    // per operand gradient; empty: kWrite
  DType boolean = DType::kUInt8;  // a boolean mask's dtype: uint8 or bool
};

// The forward's outputs (random numbers drawn after SeedRandom(kSeed)) and, given dy, the
// operands' gradients with `how.req` into arrays holding 0.25 (kNull ones stay so).
Result CallAndBackward(const Problem& p, const Inputs& in, const Values& dy, const How& how = {}) {
  const Op& def = GetOp("Attention");
  const Attrs attrs = ParseAttrs(def, AttrsOf(p));
  const std::vector<NDArray> inputs = InputArrays(p, in, how.dtype, how.boolean);
  SeedRandom(kSeed);
  const std::vector<NDArray> out = Invoke(def, attrs, inputs, {.is_train = how.is_train});
  Result r{ValuesOf(out[0]), ValuesOf(out[1])};
  if (out.size() > 2) r.rng = out[2].ToVector<int64_t>();
  if (dy.empty()) return r;
  std::vector<OpReq> req = how.req;
  req.resize(p.Operands(), OpReq::kWrite);
  std::vector<NDArray> grads;
  for (int i = 0; i < p.Operands(); ++i)
    grads.emplace_back(inputs[i].shape(), TestDevice(), how.dtype);
  for (NDArray& g : grads) g.Fill(0.25);
  if (p.HasMask()) grads.emplace_back(), req.push_back(OpReq::kNull);  // the mask: no gradient
  std::vector<NDArray> out_grads(out.size());                          // only out's is read
  out_grads[0] = ArrayOf(dy, out[0].shape(), how.dtype);
  InvokeBackward(def, attrs, inputs, out, out_grads, grads, req, how.is_train);
  for (int i = 0; i < p.Operands(); ++i) r.grads.push_back(ValuesOf(grads[i]));
  return r;
}

Values Forward(const Problem& p, const Inputs& in, const How& how = {}) {
  return CallAndBackward(p, in, {}, how).out;
}

// The operands' gradients of sum(out * dy) by central differences in float64; every call draws
// the same random numbers, so dropout keeps one mask.
std::vector<Values> NumericGrads(const Problem& p, Inputs in, const Values& dy, bool is_train) {
  const double eps = 1e-6;
  auto loss = [&] {
    const Values y = Forward(p, in, {.is_train = is_train});
    double l = 0;
    for (size_t k = 0; k < y.size(); ++k) l += y[k] * dy[k];
    return l;
  };
  std::vector<Values> grads;
  for (int i = 0; i < p.Operands(); ++i) {
    Values g(in[i].size());
    for (size_t k = 0; k < g.size(); ++k) {
      const double x = in[i][k];
      in[i][k] = x + eps;
      const double plus = loss();
      in[i][k] = x - eps;
      g[k] = (plus - loss()) / (2 * eps);
      in[i][k] = x;
    }
    grads.push_back(g);
  }
  return grads;
}

// Random inputs for p: the operands uniform in [-1, 1), the mask as `mask_init` fills it (default
// uniform, or for a boolean mask 1 where a uniform number is above -0.5).
Inputs RandomInputs(const Problem& p, uint64_t seed, std::function<void(Values&)> mask_init = {}) {
  const std::vector<Shape> shapes = ShapesOf(p);
  Inputs in;
  for (size_t i = 0; i < shapes.size(); ++i) in.push_back(Uniform(shapes[i].Size(), seed + i));
  if (p.HasMask() && p.bool_mask)
    for (double& m : in.back()) m = m > -0.5 ? 1 : 0;
  if (p.HasMask() && mask_init) mask_init(in.back());
  return in;
}

int64_t OutputSize(const Problem& p) { return p.b * p.h * p.tq * p.dv; }

// Checks the forward against the reference and the gradients against finite differences, in
// float64.
void ExpectReferenceAndGradients(const Problem& p, const Inputs& in, const std::string& what) {
  const Values dy = Uniform(OutputSize(p), 99);
  const Result r = CallAndBackward(p, in, dy);
  ExpectNear(r.out, Reference(p, in), 1e-12, what + " output");
  const std::vector<Values> want = NumericGrads(p, in, dy, false);
  for (int i = 0; i < p.Operands(); ++i)
    ExpectNear(r.grads[i], want[i], 1e-6, what + " gradient " + std::to_string(i));
}

Problem ProblemOf(const attention_torch::Case& tc) {
  const std::vector<int64_t>& d = tc.dims;
  Problem p{d[0], d[1], d[2], d[3], d[4], d[5], tc.causal, tc.scale};
  if (!tc.mask_shape.empty()) p.mask = Shape(std::span(tc.mask_shape));
  p.bool_mask = tc.bool_mask;
  p.packed = tc.packed;
  return p;
}

// ---- PyTorch ----

double TolOf(DType t) { return t == DType::kFloat64 ? 1e-12 : 2e-5; }

// PyTorch's softmax(q k^T * scale + mask) v on the same inputs (tests/attention_torch_cases.py):
// the output and the gradients of sum(y * gy), in every dtype TestDevice() tests, for additive
// and boolean masks and both layouts.
TEST_F(Attention, GivesPyTorchsOutputsAndGradients) {
  for (const attention_torch::Case& tc : attention_torch::Cases()) {
    const Problem p = ProblemOf(tc);
    Inputs in = {tc.q, tc.k, tc.v};
    const std::vector<const Values*> want = {&tc.dq, &tc.dk, &tc.dv};
    in.resize(p.Operands());
    if (p.HasMask()) in.push_back(tc.mask);
    for (DType t : TestFloatTypes()) {
      const std::string what = std::string(tc.name) + " " + DTypeName(t).data();
      const Result got = CallAndBackward(p, in, tc.gy, {.dtype = t});
      ExpectNear(got.out, tc.y, TolOf(t), what + " output");
      for (int i = 0; i < p.Operands(); ++i)
        ExpectNear(got.grads[i], *want[i], TolOf(t), what + " gradient " + std::to_string(i));
    }
  }
}

// ---- The hidden log-sum-exp ----

// The op keeps (B, H, Tq) values, log(sum_j exp(s[i, j])), and -inf for a row whose keys are all
// masked; never a Tq x Tk matrix.
TEST_F(Attention, KeepsTheLogSumExpPerRowOnly) {
  const Problem p{1, 1, 2, 3, 2, 2, false, 1.0, Shape{2, 3}};
  const Inputs in = {
      {1, 0, 0, 1}, {1, 0, 0, 1, 1, 1}, Values(6, 0.5), {0, 0, 0, -kInf, -kInf, -kInf}};
  for (DType t : TestFloatTypes()) {
    const Result got = CallAndBackward(p, in, Values(4, 1.0), {.dtype = t});
    // Row 0: scores (1, 0, 1).
    const Values want_lse = {std::log(2 * std::exp(1.0) + 1), -kInf};
    EXPECT_NEAR(got.lse[0], want_lse[0], 1e-6) << DTypeName(t);
    EXPECT_EQ(got.lse[1], -kInf) << DTypeName(t);
    ExpectNear(got.out, {0.5, 0.5, 0, 0}, 1e-6, "output with a fully masked row");
    ExpectNear({got.grads[0][2], got.grads[0][3]}, {0, 0}, 0, "d_q of the fully masked row");
  }
  const NDArray q(Shape{2, 3, 5, 4}, TestDevice()), k(Shape{2, 3, 7, 4}, TestDevice()),
      v(Shape{2, 3, 7, 6}, TestDevice());
  const std::vector<NDArray> out = Invoke("Attention", {q, k, v});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].shape(), (Shape{2, 3, 5, 6}));
  EXPECT_EQ(out[1].shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(out[1].dtype(), DType::kFloat32);
}

// ---- Layout rows: operands read, and out written, where the attributes say ----

// A packed projection (T, B, 3E) of E = H D, as PyTorch's nn.MultiheadAttention computes it, read
// in place as q, k and v (each the same input; B, H, T strides), out written token-major as
// (T, B, E) for the output projection, with a padding mask (B, 1, 1, T): the values of the
// (B, H, T, D) layout on copies of the parts, rearranged. A rows layout that leaves out's
// elements unwritten, or reads past its input, is an error saying so; it has no gradient.
TEST_F(Attention, RowsLayoutReadsAPackedProjectionInPlaceAndWritesTokenMajor) {
  const int64_t b = 2, h = 3, t = 5, d = 4, e = h * d;
  const Values packed = Uniform(t * b * 3 * e, 51);
  Values mask(b * t, 0.0);
  mask[b * t - 1] = -kInf;  // the last key of the last sequence is padding
  const Shape mask_shape{b, 1, 1, t};
  Values parts[3];  // q, k, v as (B, H, T, D)
  for (int part = 0; part < 3; ++part) {
    parts[part].resize(b * h * t * d);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t hi = 0; hi < h; ++hi)
        for (int64_t ti = 0; ti < t; ++ti)
          for (int64_t di = 0; di < d; ++di)
            parts[part][((bi * h + hi) * t + ti) * d + di] =
                packed[(ti * b + bi) * 3 * e + part * e + hi * d + di];
  }
  const Shape bhtd{b, h, t, d};
  const std::vector<NDArray> want_out = Invoke(
      GetOp("Attention"), ParseAttrs(GetOp("Attention"), {{"use_mask", "true"}}),
      {ArrayOf(parts[0], bhtd, DType::kFloat32), ArrayOf(parts[1], bhtd, DType::kFloat32),
       ArrayOf(parts[2], bhtd, DType::kFloat32), ArrayOf(mask, mask_shape, DType::kFloat32)});
  const Values by_head = ValuesOf(want_out[0]);
  Values want(t * b * e);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t ti = 0; ti < t; ++ti)
        for (int64_t di = 0; di < d; ++di)
          want[(ti * b + bi) * e + hi * d + di] = by_head[((bi * h + hi) * t + ti) * d + di];

  const auto rows_attrs = [&](const std::string& out_shape) {
    const int64_t row = b * 3 * e;  // from one position to the next in the projection
    return ParseAttrs(GetOp("Attention"),
                      {{"use_mask", "true"},
                       {"layout", "rows"},
                       {"dims", Shape{b, h, t, t, d, d}.ToString()},
                       {"rows", FormatTuple({0, 3 * e, d, row,      // q: part 0
                                             e, 3 * e, d, row,      // k: part 1
                                             2 * e, 3 * e, d, row,  // v: part 2
                                             0, e, d, b * e})},     // out: (T, B, H, D)
                       {"out_shape", out_shape}});
  };
  const NDArray p_array = ArrayOf(packed, Shape{t, b, 3 * e}, DType::kFloat32);
  const NDArray m_array = ArrayOf(mask, mask_shape, DType::kFloat32);
  const Attrs attrs = rows_attrs(Shape{t, b, e}.ToString());
  const std::vector<NDArray> got =
      Invoke(GetOp("Attention"), attrs, {p_array, p_array, p_array, m_array});
  EXPECT_EQ(got[0].shape(), (Shape{t, b, e}));
  ExpectNear(ValuesOf(got[0]), want, 1e-6, "rows layout out, token-major");
  ExpectNear(ValuesOf(got[1]), ValuesOf(want_out[1]), 1e-6, "rows layout lse");

  try {  // out (T, B, E + 1): the rows leave a column unwritten
    Invoke(GetOp("Attention"), rows_attrs(Shape{t, b, e + 1}.ToString()),
           {p_array, p_array, p_array, m_array});
    ADD_FAILURE() << "rows that leave out's elements unwritten were accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("must cover out_shape"), std::string::npos)
        << err.what();
  }
  const NDArray short_p =
      ArrayOf(Values(t * b * 3 * e - 1), Shape{t * b * 3 * e - 1}, DType::kFloat32);
  try {
    Invoke(GetOp("Attention"), attrs, {short_p, short_p, short_p, m_array});
    ADD_FAILURE() << "rows past the end of their input were accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("must lie inside"), std::string::npos) << err.what();
  }
}

// ---- Backward requests ----

// Each operand's gradient request alone, in both layouts (packed: one request for d_qkv).
TEST_F(Attention, BackwardHonoursEachRequestOnItsOwn) {
  const std::vector<std::vector<OpReq>> requests = {{OpReq::kNull, OpReq::kWrite, OpReq::kAddTo},
                                                    {OpReq::kWrite, OpReq::kNull, OpReq::kNull},
                                                    {OpReq::kAddTo, OpReq::kAddTo, OpReq::kNull},
                                                    {OpReq::kNull, OpReq::kNull, OpReq::kWrite},
                                                    {OpReq::kNull, OpReq::kAddTo, OpReq::kNull}};
  Problem p{2, 2, 5, 6, 3, 4, true, 0, Shape{2, 1, 1, 6}};
  Problem packed{2, 2, 6, 6, 3, 3, true, 0, Shape{2, 1, 1, 6}};
  packed.packed = true;
  for (const Problem& x : {p, packed}) {
    const Inputs in = RandomInputs(x, 1);
    const Values dy = Uniform(OutputSize(x), 5);
    for (DType t : TestFloatTypes()) {
      const Result want = CallAndBackward(x, in, dy, {.dtype = t});
      for (const std::vector<OpReq>& req : requests) {
        const Result got = CallAndBackward(x, in, dy, {.dtype = t, .req = req});
        for (int g = 0; g < x.Operands(); ++g) {
          Values expected(want.grads[g].size(), 0.25);
          for (size_t k = 0; k < expected.size(); ++k) {
            if (req[g] == OpReq::kWrite) expected[k] = want.grads[g][k];
            if (req[g] == OpReq::kAddTo) expected[k] += want.grads[g][k];
          }
          ExpectNear(got.grads[g], expected, TolOf(t),
                     "gradient " + std::to_string(g) + " request " +
                         std::to_string(static_cast<int>(req[g])) + " " + DTypeName(t).data());
        }
      }
    }
  }
}

// ---- Boolean masks ----

// A uint8 or bool mask: nonzero keys take part, zero ones are masked, as an additive mask of 0
// and -inf would; broadcast from (B, 1, 1, Tk), (Tq, Tk) or (B, H, Tq, Tk), with a row whose keys
// are all masked (out 0, no gradient), against the reference and finite differences.
TEST_F(Attention, BooleanMaskKeepsTheKeysItMarks) {
  if (TestDevice() != Device::Cpu()) GTEST_SKIP() << "float64 checks: the CPU's";
  std::vector<Problem> problems = {{2, 2, 3, 5, 2, 3, false, 0, Shape{2, 1, 1, 5}, true},
                                   {1, 2, 4, 4, 3, 2, true, 0, Shape{4, 4}, true},
                                   {2, 1, 3, 4, 2, 2, false, 0.5, Shape{2, 1, 3, 4}, true},
                                   {1, 1, 70, 70, 2, 2, true, 0, Shape{1, 1, 1, 70}, true}};
  for (const Problem& p : problems) {
    Inputs in = RandomInputs(p, 3, [](Values& m) { std::fill_n(m.begin(), 3, 0.0); });
    const std::string what = "boolean mask " + p.mask.ToString();
    ExpectReferenceAndGradients(p, in, what);
    // The same as an additive mask of 0 and -inf, and the same for a bool mask.
    Problem additive = p;
    additive.bool_mask = false;
    Inputs as_additive = in;
    for (double& m : as_additive.back()) m = m != 0 ? 0 : -kInf;
    ExpectNear(Forward(p, in), Forward(additive, as_additive), 0, what + " as additive");
    ExpectNear(Forward(p, in, {.boolean = DType::kBool}), Forward(p, in), 0, what + " bool");
  }
}

// ---- The packed layout ----

// qkv (B, T, 3, H, D) read in place gives what q, k, v (B, H, T, D) cut out of it give, its
// output (B, T, H, D) their output transposed, and d_qkv their gradients in qkv's layout.
TEST_F(Attention, PackedLayoutEqualsTheSeparateOperands) {
  Problem packed{2, 3, 5, 5, 4, 4, true, 0, Shape{2, 1, 1, 5}};
  packed.packed = true;
  Problem separate = packed;
  separate.packed = false;
  const Inputs in = RandomInputs(packed, 7);
  const Bhtd x = Unpacked(packed, in);
  const Inputs split = {x.q, x.k, x.v, in[1]};
  const Values dy_bhtd = Uniform(OutputSize(packed), 8);  // the separate call's (B, H, T, D)
  const Values dy = OutputLayout(packed, dy_bhtd);
  for (DType t : TestFloatTypes()) {
    const Result got = CallAndBackward(packed, in, dy, {.dtype = t});
    const Result want = CallAndBackward(separate, split, dy_bhtd, {.dtype = t});
    const double tol = TestDevice() == Device::Cpu() ? 0 : TolOf(t);  // one CPU kernel: exact
    ExpectNear(got.out, OutputLayout(packed, want.out), tol, "packed output");
    ExpectNear(got.lse, want.lse, tol, "packed lse");
    const Bhtd g = Unpacked(packed, {got.grads[0]});
    ExpectNear(g.q, want.grads[0], tol, "packed d_q");
    ExpectNear(g.k, want.grads[1], tol, "packed d_k");
    ExpectNear(g.v, want.grads[2], tol, "packed d_v");
  }
}

// ---- bfloat16 ----

// bfloat16 data computes in float32 and rounds each output once: within bfloat16's precision of
// the float32 results on the same (bfloat16-exact) inputs, for every mask, both layouts and
// dropout; lse is float32.
TEST_F(Attention, Bfloat16MatchesFloat32WithinItsPrecision) {
  if (TestDevice() != Device::Cpu()) GTEST_SKIP() << "the CPU's bfloat16";
  Problem packed{2, 2, 40, 40, 8, 8, true, 0, Shape{2, 1, 1, 40}, true};
  packed.packed = true;
  Problem dropout{1, 2, 9, 70, 4, 4, false, 0, Shape{9, 70}};
  dropout.p = 0.3;
  for (const Problem& p : {Problem{2, 2, 33, 70, 8, 4, true}, packed, dropout}) {
    Inputs in = RandomInputs(p, 21);
    for (Values& v : in) v = Bf16Exact(v);
    const Values dy = Bf16Exact(Uniform(OutputSize(p), 22));
    const bool train = p.p > 0;
    const Result want = CallAndBackward(p, in, dy, {.dtype = DType::kFloat32, .is_train = train});
    const Result got = CallAndBackward(p, in, dy, {.dtype = DType::kBFloat16, .is_train = train});
    const std::string what = "bfloat16 " + std::string(p.packed ? "packed" : "bhtd");
    ExpectNear(got.out, want.out, 1e-2, what + " output");
    ExpectNear(got.lse, want.lse, 1e-3, what + " lse");
    for (int i = 0; i < p.Operands(); ++i)
      ExpectNear(got.grads[i], want.grads[i], 3e-2, what + " gradient " + std::to_string(i));
  }
  const NDArray q = ArrayOf(Values(8, 0.5), Shape{1, 1, 2, 4}, DType::kBFloat16);
  const std::vector<NDArray> out = Invoke("Attention", {q, q, q});
  EXPECT_EQ(out[0].dtype(), DType::kBFloat16);
  EXPECT_EQ(out[1].dtype(), DType::kFloat32);
}

// ---- Dropout ----

// The dropout factor the op's key (its rng output) gives (b, h, i, j):
// ops/math/attention_dropout.h.
KeepFn KeepOf(const Problem& p, const std::vector<int64_t>& rng) {
  const uint64_t seed = static_cast<uint64_t>(rng.at(kAttentionRngSeed));
  const uint64_t offset = static_cast<uint64_t>(rng.at(kAttentionRngOffset));
  return [p, seed, offset](int64_t b, int64_t h, int64_t i, int64_t j) {
    const uint64_t e = attention::DropoutElement(b, h, i, j, p.h, p.tq, p.tk);
    return attention::DropoutKeepsAt(seed, offset, e, p.p) ? 1 / (1 - p.p) : 0.0;
  };
}

// p = 0, and p > 0 outside training, are no dropout: the same numbers bit for bit.
TEST_F(Attention, DropoutOfZeroOrOutsideTrainingChangesNothing) {
  const Problem p{2, 2, 7, 9, 3, 2, true, 0, Shape{2, 1, 1, 9}};
  Problem half = p;
  half.p = 0.5;
  const Inputs in = RandomInputs(p, 31);
  const Values dy = Uniform(OutputSize(p), 32);
  for (DType t : TestFloatTypes()) {
    const Result want = CallAndBackward(p, in, dy, {.dtype = t, .is_train = true});
    AttrMap attrs = AttrsOf(p);
    attrs["p"] = "0";
    const std::vector<NDArray> z =
        Invoke("Attention", InputArrays(p, in, t), attrs, {.is_train = true});
    ASSERT_EQ(z.size(), 2u);  // no rng output
    ExpectNear(ValuesOf(z[0]), want.out, 0, "p = 0");
    const Result inference = CallAndBackward(half, in, dy, {.dtype = t, .is_train = false});
    EXPECT_EQ(inference.rng.at(kAttentionRngApplied), 0);
    ExpectNear(inference.out, want.out, 0, "output outside training");
    for (int i = 0; i < 3; ++i)
      ExpectNear(inference.grads[i], want.grads[i], 0, "gradient outside training");
  }
}

// In training, the output is (P Z) v for the explicit Tq x Tk probabilities P of the reference
// and Z the mask the op's key gives (ops/math/attention_dropout.h): over several tiles, causal,
// masked, and packed. Both test binaries run it, with one and with four threads per op.
TEST_F(Attention, DropoutMatchesTheReferenceWithThePhiloxMask) {
  Problem packed{2, 2, 40, 40, 3, 3, true, 0, Shape{2, 1, 1, 40}, true, true, 0.25};
  const std::vector<Problem> problems = {
      {1, 2, 70, 100, 3, 2, true, 0, Shape{}, false, false, 0.4},
      {2, 1, 5, 7, 2, 3, false, 0.7, Shape{5, 7}, false, false, 0.1},
      packed};
  for (const Problem& p : problems) {
    const Inputs in = RandomInputs(p, 41);
    for (DType t : TestFloatTypes()) {
      const Result r = CallAndBackward(p, in, {}, {.dtype = t, .is_train = true});
      ASSERT_EQ(r.rng.size(), 3u);
      EXPECT_EQ(r.rng[kAttentionRngApplied], 1);
      const std::string what = "dropout " + std::to_string(p.p) + " " + DTypeName(t).data();
      ExpectNear(r.out, Reference(p, in, KeepOf(p, r.rng)), TolOf(t), what);
      // Dropout changed the output: the check above can tell a mask from none.
      const Values plain = Reference(p, in);
      double diff = 0;
      for (size_t k = 0; k < plain.size(); ++k)
        diff = std::max(diff, std::abs(r.out[k] - plain[k]));
      EXPECT_GT(diff, 0.05) << what;
    }
  }
}

// The op's mask read back through its output (q = 0: every probability 1 / Tk; v = I: out[i, j]
// = Z[i, j] / Tk): it is the rule's, and keeps a fraction 1 - p within 5 standard deviations;
// the same seed gives the same mask, the next call another.
TEST_F(Attention, DropoutKeepsOneMinusPOfTheProbabilities) {
  const double p_drop = 0.3;
  const Problem p{2, 3, 40, 64, 2, 64, false, 0, Shape{}, false, false, p_drop};
  Inputs in = {Values(p.b * p.h * p.tq * p.d, 0.0), Uniform(p.b * p.h * p.tk * p.d, 51),
               Values(p.b * p.h * p.tk * p.dv, 0.0)};
  for (int64_t bh = 0; bh < p.b * p.h; ++bh)
    for (int64_t j = 0; j < p.tk; ++j) in[2][(bh * p.tk + j) * p.dv + j] = 1;
  const DType t = TestFloatTypes().back();  // float64 where the device has it
  const Result r = CallAndBackward(p, in, {}, {.dtype = t, .is_train = true});
  const KeepFn keep = KeepOf(p, r.rng);
  int64_t kept = 0;
  for (int64_t b = 0; b < p.b; ++b)
    for (int64_t h = 0; h < p.h; ++h)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t j = 0; j < p.tk; ++j) {
          const double z = r.out[((b * p.h + h) * p.tq + i) * p.tk + j] * p.tk;
          ASSERT_NEAR(z, keep(b, h, i, j), 2 * TolOf(t)) << b << " " << h << " " << i << " " << j;
          kept += z != 0;
        }
  const double n = static_cast<double>(p.b * p.h * p.tq * p.tk);
  EXPECT_LE(std::abs(kept - n * (1 - p_drop)), 5 * std::sqrt(n * p_drop * (1 - p_drop)))
      << kept << " of " << n;
  EXPECT_EQ(Forward(p, in, {.dtype = t, .is_train = true}), r.out);  // the same key: the same mask
  const NDArray again =
      Invoke("Attention", InputArrays(p, in, DType::kFloat64), AttrsOf(p), {.is_train = true})[0];
  EXPECT_NE(ValuesOf(again), r.out);  // the next range: another mask
}

// The backward regenerates the forward's mask from its key: against central differences of the
// forward with the same mask (the same seed before each call), float64.
TEST_F(Attention, DropoutBackwardMatchesFiniteDifferencesWithTheMaskFixed) {
  if (TestDevice() != Device::Cpu()) GTEST_SKIP() << "float64 checks: the CPU's";
  Problem packed{1, 2, 6, 6, 2, 2, true, 0, Shape{1, 1, 6, 6}, false, true, 0.3};
  const std::vector<Problem> problems = {
      {2, 2, 5, 7, 3, 2, false, 0, Shape{2, 1, 1, 7}, true, false, 0.4},
      {1, 1, 70, 3, 2, 2, true, 0, Shape{}, false, false, 0.2},
      packed};
  for (const Problem& p : problems) {
    const Inputs in = RandomInputs(p, 61, [](Values& m) { m[0] = 1; });
    const Values dy = Uniform(OutputSize(p), 62);
    const Result r = CallAndBackward(p, in, dy, {.is_train = true});
    const std::vector<Values> want = NumericGrads(p, in, dy, true);
    for (int i = 0; i < p.Operands(); ++i) {
      ExpectNear(r.grads[i], want[i], 1e-6,
                 "dropout " + std::to_string(p.p) + " gradient " + std::to_string(i));
    }
  }
}

// ---- Bad input ----

TEST_F(Attention, BadShapesSayWhatWasExpected) {
  ExpectOpError("Attention", {}, {Shape{2, 3, 4}, Shape{2, 3, 4}, Shape{2, 3, 4}},
                {"Attention", "q must have 4 axes (B, H, Tq, D)", "found (2, 3, 4)"});
  ExpectOpError("Attention", {}, {Shape{1, 2, 3, 4}, Shape{1, 2, 5, 8}, Shape{1, 2, 5, 4}},
                {"Attention", "k must be (B, H, Tk, D) = (1, 2, Tk, 4)", "found (1, 2, 5, 8)"});
  ExpectOpError("Attention", {}, {Shape{1, 2, 3, 4}, Shape{2, 2, 5, 4}, Shape{1, 2, 5, 4}},
                {"Attention", "k must be", "found (2, 2, 5, 4)"});
  ExpectOpError("Attention", {}, {Shape{1, 2, 3, 4}, Shape{1, 2, 5, 4}, Shape{1, 2, 6, 4}},
                {"Attention", "v must be (B, H, Tk, Dv) = (1, 2, 5, Dv)", "found (1, 2, 6, 4)"});
  ExpectOpError("Attention", {{"use_mask", "true"}},
                {Shape{2, 2, 3, 4}, Shape{2, 2, 5, 4}, Shape{2, 2, 5, 4}, Shape{2, 1, 3, 4}},
                {"Attention", "mask (2, 1, 3, 4) does not broadcast to (B, H, Tq, Tk) (2, 2, 3, 5)",
                 "expected 5 or 1 for its axis 3, found 4"});
  ExpectOpError("Attention", {{"use_mask", "true"}},
                {Shape{1, 1, 3, 4}, Shape{1, 1, 5, 4}, Shape{1, 1, 5, 4}, Shape{1, 1, 1, 3, 5}},
                {"Attention", "mask must have 1 to 4 axes", "found (1, 1, 1, 3, 5)"});
  ExpectOpError("Attention", {}, {Shape{1, 1, 0, 4}, Shape{1, 1, 5, 4}, Shape{1, 1, 5, 4}},
                {"Attention", "q must be non-empty, found (1, 1, 0, 4)"});
  const AttrMap packed = {{"layout", "bt3hd"}};
  ExpectOpError("Attention", packed, {Shape{2, 5, 2, 3, 4}},
                {"Attention", "layout 'bt3hd'", "qkv must have 5 axes (B, T, 3, H, D)",
                 "found (2, 5, 2, 3, 4)"});
  ExpectOpError("Attention", packed, {Shape{2, 5, 3, 4}},
                {"Attention", "qkv must have 5 axes", "found (2, 5, 3, 4)"});
  ExpectOpError("Attention", packed, {Shape{2, 5, 3, 4, 8}, Shape{1, 2, 3, 4, 8}},
                {"Attention", "expected 1 input(s), found 2"});
  ExpectOpError(
      "Attention", {{"layout", "bt3hd"}, {"use_mask", "true"}},
      {Shape{2, 5, 3, 4, 8}, Shape{2, 1, 1, 4}},
      {"Attention", "mask (2, 1, 1, 4) does not broadcast to (B, H, Tq, Tk) (2, 4, 5, 5)"});
}

TEST_F(Attention, BadAttributesAndTypesSayWhatWasExpected) {
  const std::vector<Shape> shapes = {Shape{1, 1, 2, 2}, Shape{1, 1, 2, 2}, Shape{1, 1, 2, 2}};
  for (const char* p : {"1", "-0.1", "1.5", "nan"}) {
    ExpectOpError("Attention", {{"p", p}}, shapes,
                  {"Attention", "attribute 'p'", "expected a dropout probability in [0, 1)"});
  }
  ExpectOpError("Attention", {{"layout", "bshd"}}, shapes,
                {"Attention", "layout", "'bshd'", "one of 'bhtd' 'bt3hd'"});
  ExpectOpError("Attention", {{"causal", "maybe"}}, shapes, {"Attention", "causal", "'maybe'"});
  for (const char* scale : {"nan", "inf"}) {
    ExpectOpError("Attention", {{"scale", scale}}, shapes,
                  {"Attention", "attribute 'scale'", "expected a finite number", scale});
  }
  const Shape s{1, 1, 2, 2};
  const NDArray f = ArrayOf(Values(4, 0.5), s, DType::kFloat32);
  const AttrMap mask = {{"use_mask", "true"}};
  const auto expect_error = [&](const std::vector<NDArray>& in, std::vector<std::string> parts) {
    try {
      Invoke("Attention", in, mask)[0].WaitToRead();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      for (const std::string& part : parts)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error(
      {f, f, f, ArrayOf(Values(4, 0), s, DType::kInt32)},
      {"Attention", "mask must be float32 (additive) or bool or uint8 (boolean)", "found int32"});
  expect_error({f, f, f, ArrayOf(Values(4, 0), s, DType::kFloat64)}, {"found float64"});
  expect_error({f, ArrayOf(Values(4, 0), s, DType::kBFloat16), f, f},
               {"Attention", "k must be float32 like q, found bfloat16"});
}

}  // namespace
}  // namespace weft::testing
