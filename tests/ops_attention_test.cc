// Attention and _backward_Attention (ops/nn/attention.cc). Declarative cases against a plain
// float64 reference of softmax(scale * q k^T + mask, causal) v, each with its finite-difference
// gradient (op_test_util.h): causal or not, no mask, a full mask, a (1, 1, Tq, Tk) mask and a
// (B, 1, 1, Tk) padding mask, Tq != Tk, D != Dv, a given scale, rows with every key masked, and
// shapes over several query and key tiles. PyTorch's numbers (tests/attention_torch_cases.h),
// every backward request, the hidden log-sum-exp, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/op.h"
#include "storage/ndarray.h"
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
  double scale = 0;  // 0: the default 1 / sqrt(D)
  Shape mask;        // no axes: no mask

  bool HasMask() const { return mask.ndim() > 0; }
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

// softmax(scale * q k^T + mask) v per (b, h) pair; a row with every key masked gives 0.
Values Reference(const Problem& p, const Inputs& in) {
  Values y(p.b * p.h * p.tq * p.dv, 0.0), s(p.tk);
  for (int64_t bi = 0; bi < p.b; ++bi) {
    for (int64_t hi = 0; hi < p.h; ++hi) {
      const int64_t bh = bi * p.h + hi;
      for (int64_t i = 0; i < p.tq; ++i) {
        double max = -kInf;
        for (int64_t j = 0; j < p.tk; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < p.d; ++c)
            dot += in[0][(bh * p.tq + i) * p.d + c] * in[1][(bh * p.tk + j) * p.d + c];
          s[j] = p.Scale() * dot + (p.HasMask() ? p.MaskAt(in[3], bi, hi, i, j) : 0);
          if (p.causal && j > i) s[j] = -kInf;
          max = std::max(max, s[j]);
        }
        if (max == -kInf) continue;
        double sum = 0;
        for (int64_t j = 0; j < p.tk; ++j) sum += s[j] = std::exp(s[j] - max);
        for (int64_t j = 0; j < p.tk; ++j) {
          for (int64_t c = 0; c < p.dv; ++c)
            y[(bh * p.tq + i) * p.dv + c] += s[j] / sum * in[2][(bh * p.tk + j) * p.dv + c];
        }
      }
    }
  }
  return y;
}

AttrMap AttrsOf(const Problem& p) {
  AttrMap a = {{"causal", p.causal ? "true" : "false"}};
  if (p.HasMask()) a["use_mask"] = "true";
  if (p.scale != 0) a["scale"] = std::to_string(p.scale);
  return a;
}

std::vector<Shape> ShapesOf(const Problem& p) {
  std::vector<Shape> s = {Shape{p.b, p.h, p.tq, p.d}, Shape{p.b, p.h, p.tk, p.d},
                          Shape{p.b, p.h, p.tk, p.dv}};
  if (p.HasMask()) s.push_back(p.mask);
  return s;
}

// `mask_init` fills the mask (default: uniform in [-1, 1)).
OpCase AttentionCase(const std::string& name, const Problem& p,
                     std::function<void(Values&)> mask_init = nullptr) {
  OpCase c{"Attention", AttrsOf(p), ShapesOf(p),
           [p](const Inputs& in) { return Outputs{Reference(p, in)}; }};
  c.init = [mask_init](int i, Values& v) {
    v = Uniform(v.size(), 11 + i);
    if (i == 3 && mask_init) mask_init(v);
  };
  if (p.HasMask()) c.no_gradient_inputs = {3};
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
// ---- Calls ----

// The forward outputs (out, lse) and the gradients (d_q, d_k, d_v) of one call in `dtype`, the
// gradients with `req` into arrays holding 0.25 (kNull ones stay so).
std::vector<Values> CallAndBackward(const Problem& p, const Inputs& in, const Values& dy,
                                    DType dtype,
                                    std::vector<OpReq> req = {OpReq::kWrite, OpReq::kWrite,
                                                              OpReq::kWrite}) {
  const Op& def = GetOp("Attention");
  const Attrs attrs = ParseAttrs(def, AttrsOf(p));
  const std::vector<Shape> shapes = ShapesOf(p);
  std::vector<NDArray> inputs, grads;
  for (size_t i = 0; i < shapes.size(); ++i) inputs.push_back(ArrayOf(in[i], shapes[i], dtype));
  const std::vector<NDArray> out = Invoke(def, attrs, inputs);
  for (int i = 0; i < 3; ++i) grads.emplace_back(shapes[i], TestDevice(), dtype);
  for (NDArray& g : grads) g.Fill(0.25);
  NDArray lse_grad(out[1].shape(), TestDevice(), out[1].dtype());
  lse_grad.Fill(0);
  if (p.HasMask()) grads.emplace_back(), req.push_back(OpReq::kNull);  // the mask: no gradient
  InvokeBackward(def, attrs, inputs, out, {ArrayOf(dy, out[0].shape(), dtype), lse_grad}, grads,
                 req);
  return {ValuesOf(out[0]), ValuesOf(out[1]), ValuesOf(grads[0]), ValuesOf(grads[1]),
          ValuesOf(grads[2])};
}

Problem ProblemOf(const attention_torch::Case& tc) {
  const std::vector<int64_t>& d = tc.dims;
  return {d[0],      d[1],     d[2],
          d[3],      d[4],     d[5],
          tc.causal, tc.scale, tc.mask_shape.empty() ? Shape() : Shape(std::span(tc.mask_shape))};
}

// ---- PyTorch ----

double TolOf(DType t) { return t == DType::kFloat64 ? 1e-12 : 2e-5; }

// PyTorch's softmax(q k^T * scale + mask) v on the same inputs (tests/attention_torch_cases.py):
// the output and the gradients of sum(y * gy), in every dtype TestDevice() tests.
TEST_F(Attention, GivesPyTorchsOutputsAndGradients) {
  for (const attention_torch::Case& tc : attention_torch::Cases()) {
    const Problem p = ProblemOf(tc);
    Inputs in = {tc.q, tc.k, tc.v};
    if (p.HasMask()) in.push_back(tc.mask);
    for (DType t : TestFloatTypes()) {
      const std::string what = std::string(tc.name) + " " + DTypeName(t).data();
      const std::vector<Values> got = CallAndBackward(p, in, tc.gy, t);
      ExpectNear(got[0], tc.y, TolOf(t), what + " output");
      ExpectNear(got[2], tc.dq, TolOf(t), what + " d_q");
      ExpectNear(got[3], tc.dk, TolOf(t), what + " d_k");
      ExpectNear(got[4], tc.dv, TolOf(t), what + " d_v");
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
    const std::vector<Values> got = CallAndBackward(p, in, Values(4, 1.0), t);
    // Row 0: scores (1, 0, 1).
    const Values want_lse = {std::log(2 * std::exp(1.0) + 1), -kInf};
    EXPECT_NEAR(got[1][0], want_lse[0], 1e-6) << DTypeName(t);
    EXPECT_EQ(got[1][1], -kInf) << DTypeName(t);
    ExpectNear(got[0], {0.5, 0.5, 0, 0}, 1e-6, "output with a fully masked row");
    ExpectNear({got[2][2], got[2][3]}, {0, 0}, 0, "d_q of the fully masked row");
  }
  const NDArray q(Shape{2, 3, 5, 4}, TestDevice()), k(Shape{2, 3, 7, 4}, TestDevice()),
      v(Shape{2, 3, 7, 6}, TestDevice());
  const std::vector<NDArray> out = Invoke("Attention", {q, k, v});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].shape(), (Shape{2, 3, 5, 6}));
  EXPECT_EQ(out[1].shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(out[1].dtype(), DType::kFloat32);
}

// ---- Backward requests ----

TEST_F(Attention, BackwardHonoursEachRequestOnItsOwn) {
  const std::vector<std::vector<OpReq>> requests = {{OpReq::kNull, OpReq::kWrite, OpReq::kAddTo},
                                                    {OpReq::kWrite, OpReq::kNull, OpReq::kNull},
                                                    {OpReq::kAddTo, OpReq::kAddTo, OpReq::kNull},
                                                    {OpReq::kNull, OpReq::kNull, OpReq::kWrite},
                                                    {OpReq::kNull, OpReq::kAddTo, OpReq::kNull}};
  const Problem p{2, 2, 5, 6, 3, 4, true, 0, Shape{2, 1, 1, 6}};
  const Inputs in = {Uniform(60, 1), Uniform(72, 2), Uniform(96, 3), Uniform(12, 4)};
  const Values dy = Uniform(80, 5);
  for (DType t : TestFloatTypes()) {
    const std::vector<Values> want = CallAndBackward(p, in, dy, t);
    for (const std::vector<OpReq>& req : requests) {
      const std::vector<Values> got = CallAndBackward(p, in, dy, t, req);
      for (int g = 0; g < 3; ++g) {
        Values expected(want[2 + g].size(), 0.25);
        for (size_t k = 0; k < expected.size(); ++k) {
          if (req[g] == OpReq::kWrite) expected[k] = want[2 + g][k];
          if (req[g] == OpReq::kAddTo) expected[k] += want[2 + g][k];
        }
        ExpectNear(got[2 + g], expected, TolOf(t),
                   "gradient " + std::to_string(g) + " request " +
                       std::to_string(static_cast<int>(req[g])) + " " + DTypeName(t).data());
      }
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
}

TEST_F(Attention, BadAttributesAndTypesSayWhatWasExpected) {
  const std::vector<Shape> shapes = {Shape{1, 1, 2, 2}, Shape{1, 1, 2, 2}, Shape{1, 1, 2, 2}};
  ExpectOpError("Attention", {{"p", "0.1"}}, shapes,
                {"Attention", "attribute 'p'", "not supported yet", "expected 0, found 0.1"});
  ExpectOpError("Attention", {{"causal", "maybe"}}, shapes, {"Attention", "causal", "'maybe'"});
  for (const char* scale : {"nan", "inf"}) {
    ExpectOpError("Attention", {{"scale", scale}}, shapes,
                  {"Attention", "attribute 'scale'", "expected a finite number", scale});
  }
  if (TestDevice() != Device::Cpu()) return;
  std::vector<NDArray> in;
  for (const Shape& s : shapes) in.push_back(ArrayOf(Values(s.Size(), 0.5), s, DType::kBFloat16));
  try {
    Invoke("Attention", in)[0].WaitToRead();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const char* part : {"Attention", "float32 or float64", "found bfloat16"})
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weft::testing
