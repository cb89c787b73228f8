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

// ---- Declarative cases ----

TEST(Attention, MatchesTheReferenceWithoutMask) {
  RunOpCase(AttentionCase("plain", {1, 2, 3, 3, 4, 4}));
  RunOpCase(AttentionCase("causal", {2, 2, 4, 4, 3, 3, true}));
  RunOpCase(AttentionCase("tq < tk, d != dv", {2, 1, 3, 5, 4, 2}));
  RunOpCase(AttentionCase("tq > tk causal", {1, 2, 5, 3, 2, 3, true}));
  RunOpCase(AttentionCase("scale 0.5", {1, 1, 3, 4, 2, 2, false, 0.5}));
}

TEST(Attention, MatchesTheReferenceWithMasks) {
  RunOpCase(AttentionCase("full mask", {2, 2, 3, 4, 2, 3, false, 0, Shape{2, 2, 3, 4}}));
  RunOpCase(AttentionCase("(1, 1, Tq, Tk) mask causal", {2, 2, 4, 4, 3, 2, true, 0,
                                                          Shape{1, 1, 4, 4}}));
  // (B, 1, 1, Tk): batch 1's last two keys are padding.
  RunOpCase(AttentionCase("padding mask", {2, 2, 3, 5, 2, 2, false, 0, Shape{2, 1, 1, 5}},
                          [](Values& m) {
                            for (size_t k = 0; k < m.size(); ++k) m[k] = k >= 8 ? -kInf : 0;
                          }));
  RunOpCase(AttentionCase("(Tq, Tk) mask", {1, 2, 3, 4, 2, 2, false, 0, Shape{3, 4}}));
}

// Query 1's keys are all masked: its output is 0 and it adds no gradient anywhere.
TEST(Attention, ARowWithEveryKeyMaskedGivesZero) {
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
TEST(Attention, MatchesTheReferenceOverSeveralTiles) {
  RunOpCase(AttentionCase("tiles causal", {1, 1, 70, 100, 3, 2, true}));
  RunOpCase(AttentionCase("tiles padding", {2, 1, 40, 70, 2, 3, false, 0, Shape{2, 1, 1, 70}},
                          [](Values& m) {
                            for (size_t k = 0; k < m.size(); ++k) m[k] = k >= 130 ? -kInf : 0;
                          }));
}

}  // namespace
}  // namespace weft::testing
