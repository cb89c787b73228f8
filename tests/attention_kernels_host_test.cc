// Attention's GPU kernels (ops/gpu/kernels/attention.cuh, and attention_tiled.cuh for heads of at
// most 64 columns) run on the host through tests/kernel_host_shim.h (a std::thread per GPU thread,
// a barrier per block), against a plain float64 reference: the forward's out and lse, and the
// backward's d_q, d_k and d_v, in float, double and bfloat16 data; causal, a mask with a fully
// masked query, Tq != Tk over several key tiles, D over one staging chunk, and outputs wider than
// one column chunk; dropout, its key written by AttnWriteKey (a replay's shift added) and read back
// by the backward, against a reference with the Philox mask of ops/math/attention_dropout.h; fewer
// blocks than work items, so every grid-stride loop turns. No GPU needed: this runs in every build,
// and checks the kernels' arithmetic and tiling where no GPU is lent (gpu_attention_test checks
// them on a GPU against the CPU's op).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/math/attention_dropout.h"
#include "tests/op_test_util.h"

// The shim before the kernels: it defines what they use of CUDA.
// clang-format off
#include "tests/kernel_host_shim.h"
#include "ops/gpu/kernels/attention.cuh"
#include "ops/gpu/kernels/attention_tiled.cuh"
#include "tests/kernel_host_values.h"
// clang-format on

namespace weft::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Problem {
  std::string name;
  int64_t b, h, tq, tk, d, dv;
  bool causal = false;
  bool mask = false;        // a (Tq, Tk) additive mask, broadcast over B and H
  int64_t masked_row = -1;  // a query whose keys the mask removes all of
  double p = 0;             // dropout, with the key below
  double scale() const { return 1 / std::sqrt(static_cast<double>(d)); }
};

constexpr uint64_t kSeed = 1234, kOffset = 77, kShift = 5;  // the forward draws at 77 + 5

// The dropout factor of (bh, i, j): 0 or 1 / (1 - p); 1 without dropout.
double Keep(const Problem& p, int64_t bh, int64_t i, int64_t j) {
  if (p.p == 0) return 1;
  const uint64_t e = attention::DropoutElement(bh / p.h, bh % p.h, i, j, p.h, p.tq, p.tk);
  return attention::DropoutKeepsAt(kSeed, kOffset + kShift, e, p.p) ? 1 / (1 - p.p) : 0;
}

// n values in [-1, 1), multiples of 1/128: exact in bfloat16.
Values BfExactUniform(int64_t n, uint64_t seed) {
  Values v(n);
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (double& e : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    e = static_cast<double>(static_cast<int64_t>(x >> 40) % 256) / 128.0 - 1;  // exact in bf16
  }
  return v;
}

struct Tensors {
  Values q, k, v, mask, dy;
};

Tensors InputsOf(const Problem& p) {
  Tensors t{BfExactUniform(p.b * p.h * p.tq * p.d, 1), BfExactUniform(p.b * p.h * p.tk * p.d, 2),
            BfExactUniform(p.b * p.h * p.tk * p.dv, 3), BfExactUniform(p.tq * p.tk, 4),
            BfExactUniform(p.b * p.h * p.tq * p.dv, 5)};
  if (p.masked_row >= 0) {
    for (int64_t j = 0; j < p.tk; ++j) t.mask[p.masked_row * p.tk + j] = -kInf;
  }
  return t;
}

// out, lse, d_q, d_k, d_v.
using Results = std::vector<Values>;

// The reference, in float64: P = softmax(s), Z the dropout factors, out = (P Z) v,
// dS = P (Z dy v^T - rowsum(dy * out)), d_v = (P Z)^T dy.
Results Reference(const Problem& p, const Tensors& t) {
  Results r = {Values(p.b * p.h * p.tq * p.dv), Values(p.b * p.h * p.tq), Values(t.q.size()),
               Values(t.k.size()), Values(t.v.size())};
  for (int64_t bh = 0; bh < p.b * p.h; ++bh) {
    const double *q = &t.q[bh * p.tq * p.d], *k = &t.k[bh * p.tk * p.d];
    const double *v = &t.v[bh * p.tk * p.dv], *dy = &t.dy[bh * p.tq * p.dv];
    for (int64_t i = 0; i < p.tq; ++i) {
      Values s(p.tk);
      double max = -kInf;
      for (int64_t j = 0; j < p.tk; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < p.d; ++c) dot += q[i * p.d + c] * k[j * p.d + c];
        s[j] = p.scale() * dot + (p.mask ? t.mask[i * p.tk + j] : 0);
        if (p.causal && j > i) s[j] = -kInf;
        max = std::max(max, s[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < p.tk; ++j) sum += max == -kInf ? 0 : std::exp(s[j] - max);
      r[1][bh * p.tq + i] = sum == 0 ? -kInf : max + std::log(sum);
      Values prob(p.tk), dp(p.tk);
      double delta = 0;
      for (int64_t j = 0; j < p.tk; ++j) prob[j] = sum == 0 ? 0 : std::exp(s[j] - max) / sum;
      for (int64_t c = 0; c < p.dv; ++c) {
        double o = 0;
        for (int64_t j = 0; j < p.tk; ++j) o += prob[j] * Keep(p, bh, i, j) * v[j * p.dv + c];
        r[0][(bh * p.tq + i) * p.dv + c] = o;
        delta += o * dy[i * p.dv + c];
      }
      for (int64_t j = 0; j < p.tk; ++j) {
        const double z = Keep(p, bh, i, j);
        for (int64_t c = 0; c < p.dv; ++c) dp[j] += z * dy[i * p.dv + c] * v[j * p.dv + c];
        const double ds = prob[j] * (dp[j] - delta);
        for (int64_t c = 0; c < p.d; ++c) {
          r[2][(bh * p.tq + i) * p.d + c] += p.scale() * ds * k[j * p.d + c];
          r[3][(bh * p.tk + j) * p.d + c] += p.scale() * ds * q[i * p.d + c];
        }
        for (int64_t c = 0; c < p.dv; ++c)
          r[4][(bh * p.tk + j) * p.dv + c] += prob[j] * z * dy[i * p.dv + c];
      }
    }
  }
  return r;
}

// Row-major q, k, v and out; the mask (Tq, Tk), broadcast over B and H.
GpuAttention ParamsOf(const Problem& p) {
  auto dense = [&](int64_t t, int64_t c) { return GpuAttnStrides{p.h * t * c, t * c, c}; };
  return {p.b,
          p.h,
          p.tq,
          p.tk,
          p.d,
          p.dv,
          dense(p.tq, p.d),
          dense(p.tk, p.d),
          dense(p.tk, p.dv),
          dense(p.tq, p.dv),
          {0, 0, p.tk, 1},
          p.scale(),
          p.causal ? 1 : 0};
}

// Blocks of a launch: fewer than the items, so that each block takes several.
unsigned Blocks(long long items) { return static_cast<unsigned>(std::min<long long>(items, 3)); }

// The kernels with COLS accumulators per thread, for outputs of `cols` columns.
template <int COLS, typename T, typename A>
void Forward(const Problem& p, const GpuAttention& g, const GpuAttnDropout& z,
             const std::vector<T>& q, const std::vector<T>& k, const std::vector<T>& v,
             const T* mask, std::vector<T>& out, std::vector<A>& lse) {
  HostLaunch(Blocks(AttnItems(p.b * p.h, p.tq, p.dv, COLS)), kGpuBlock, [&] {
    AttnForward<T, A, T, COLS>(q.data(), k.data(), v.data(), mask, out.data(), lse.data(), g, z,
                               kReqWrite, kReqWrite);
  });
}

template <int COLS, typename T, typename A>
void QueryGrad(const Problem& p, const GpuAttention& g, const GpuAttnDropout& z,
               const std::vector<T>* x, const T* mask, const std::vector<A>& lse,
               const std::vector<A>& delta, std::vector<T>& dq) {
  HostLaunch(Blocks(AttnItems(p.b * p.h, p.tq, p.d, COLS)), kGpuBlock, [&] {
    AttnQueryGrad<T, A, T, COLS>(x[3].data(), x[0].data(), x[1].data(), x[2].data(), mask,
                                 lse.data(), delta.data(), dq.data(), g, z, kReqWrite);
  });
}

template <int COLS, typename T, typename A>
void KeyGrad(const Problem& p, const GpuAttention& g, const GpuAttnDropout& z,
             const std::vector<T>* x, const T* mask, const std::vector<A>& lse,
             const std::vector<A>& delta, std::vector<T>& dk, std::vector<T>& dv) {
  HostLaunch(Blocks(AttnItems(p.b * p.h, p.tk, std::max(p.d, p.dv), COLS)), kGpuBlock, [&] {
    AttnKeyGrad<T, A, T, COLS>(x[3].data(), x[0].data(), x[1].data(), x[2].data(), mask, lse.data(),
                               delta.data(), dk.data(), dv.data(), g, z, kReqWrite, kReqWrite);
  });
}

// Calls fn.template operator()<COLS>() for COLS = AttnPerThread(cols).
template <typename F>
void WithPerThread(long long cols, F fn) {
  switch (AttnPerThread(cols)) {
    case 4:
      return fn.template operator()<4>();
    case 8:
      return fn.template operator()<8>();
    case 16:
      return fn.template operator()<16>();
    default:
      return fn.template operator()<32>();
  }
}

// The tiled kernels (heads of at most 64 columns, float arithmetic) in place of AttnForward,
// AttnQueryGrad and AttnKeyGrad, as ops/gpu/attention.cc launches them.
template <typename T>
void RunTiled(const Problem& p, const GpuAttention& g, const GpuAttnDropout& forward,
              const GpuAttnDropout& backward, const std::vector<T>* x, const T* m,
              std::vector<T>* y, std::vector<float>& lse, const std::vector<float>& delta,
              bool forward_pass) {
  const auto blocks = [&](int64_t rows) {
    return Blocks(p.b * p.h * ((rows + kAtTile - 1) / kAtTile));
  };
  if (forward_pass) {
    HostLaunch(blocks(p.tq), kGpuBlock, [&] {
      AttnForwardTiled<T, T>(x[0].data(), x[1].data(), x[2].data(), m, y[0].data(), lse.data(), g,
                             forward, kReqWrite, kReqWrite);
    });
    return;
  }
  HostLaunch(blocks(p.tq), kGpuBlock, [&] {
    AttnQueryGradTiled<T, T>(x[3].data(), x[0].data(), x[1].data(), x[2].data(), m, lse.data(),
                             delta.data(), y[1].data(), g, backward, kReqWrite);
  });
  HostLaunch(blocks(p.tk), kGpuBlock, [&] {
    AttnKeyGradTiled<T, T>(x[3].data(), x[0].data(), x[1].data(), x[2].data(), m, lse.data(),
                           delta.data(), y[2].data(), y[3].data(), g, backward, kReqWrite,
                           kReqWrite);
  });
}

// Every kernel in (T, A), as ops/gpu/attention.cc launches them: attention.cuh's, or with `tiled`
// attention_tiled.cuh's (A float) and AttnDelta.
template <typename T, typename A>
Results RunKernels(const Problem& p, const Tensors& t, bool tiled = false) {
  const GpuAttention g = ParamsOf(p);
  const std::vector<T> x[4] = {As<T>(t.q), As<T>(t.k), As<T>(t.v), As<T>(t.dy)};
  const std::vector<T> mask = As<T>(t.mask);
  const T* m = p.mask ? mask.data() : nullptr;
  // out, d_q, d_k, d_v
  std::vector<T> y[4] = {std::vector<T>(p.b * p.h * p.tq * p.dv), std::vector<T>(t.q.size()),
                         std::vector<T>(t.k.size()), std::vector<T>(t.v.size())};
  std::vector<A> lse(p.b * p.h * p.tq), delta(lse.size());
  // The forward draws at kOffset + the shift in "device memory" and writes that key (as
  // ops/gpu/attention.cc does); the backward reads it back, so it sees the forward's mask.
  const unsigned long long shift = kShift;
  const GpuAttnDropout forward{p.p, kSeed, kOffset, &shift, nullptr};
  long long key[3] = {};
  HostLaunch(1, kGpuBlock, [&] { AttnWriteKey(key, forward, p.p > 0 ? 1 : 0); });
  const GpuAttnDropout backward{p.p, 0, 0, nullptr, key};
  if constexpr (std::is_same_v<A, float>) {
    if (tiled) RunTiled(p, g, forward, backward, x, m, y, lse, delta, /*forward_pass=*/true);
  }
  if (!tiled) {
    WithPerThread(p.dv,
                  [&]<int C>() { Forward<C>(p, g, forward, x[0], x[1], x[2], m, y[0], lse); });
  }
  HostLaunch(1, kGpuBlock, [&] { AttnDelta<T, A>(x[3].data(), y[0].data(), delta.data(), g); });
  if constexpr (std::is_same_v<A, float>) {
    if (tiled) RunTiled(p, g, forward, backward, x, m, y, lse, delta, /*forward_pass=*/false);
  }
  if (!tiled) {
    WithPerThread(p.d, [&]<int C>() { QueryGrad<C>(p, g, backward, x, m, lse, delta, y[1]); });
    WithPerThread(std::max(p.d, p.dv),
                  [&]<int C>() { KeyGrad<C>(p, g, backward, x, m, lse, delta, y[2], y[3]); });
  }
  Values lse_values(lse.begin(), lse.end());
  return {Back(y[0]), lse_values, Back(y[1]), Back(y[2]), Back(y[3])};
}

const char* const kNames[] = {"out", "lse", "d_q", "d_k", "d_v"};

template <typename T, typename A>
void ExpectKernelsMatch(const Problem& p, double tol, const std::string& type, bool tiled = false) {
  const Tensors t = InputsOf(p);
  const Results want = Reference(p, t), got = RunKernels<T, A>(p, t, tiled);
  for (int o = 0; o < 5; ++o) {
    ExpectNear(got[o], want[o], tol, p.name + " " + type + (tiled ? " tiled " : " ") + kNames[o]);
  }
}

// 37 queries (two tiles) and 45 keys (two tiles), causal, a mask, query 3's keys all masked.
const Problem kMasked{"causal, mask, fully masked row", 1, 2, 37, 45, 20, 12, true, true, 3};
// 5 queries and 40 keys (two tiles), D 36 (two staging chunks), Dv 40 (8 accumulators).
const Problem kWide{"Tq < Tk, D 36, Dv 40", 1, 1, 5, 40, 36, 40};
// D 260: d_q, d_k and d_v in two column chunks of 256.
const Problem kChunks{"D 260: two column chunks", 2, 1, 3, 4, 260, 8, true};

TEST(AttentionKernelsOnHost, FloatMatchesTheReference) {
  for (const Problem& p : {kMasked, kWide, kChunks})
    ExpectKernelsMatch<float, float>(p, 2e-5, "float");
}

TEST(AttentionKernelsOnHost, DoubleMatchesTheReference) {
  ExpectKernelsMatch<double, double>(kMasked, 1e-12, "double");
}

// 130 queries (three tiles of 64) and 150 keys, heads of 64 columns: the tiled forward's widest.
const Problem kTiles{"Tq 130, Tk 150, D 64", 2, 1, 130, 150, 64, 64};

TEST(AttentionKernelsOnHost, TiledKernelsMatchTheReference) {
  Problem causal = kTiles, dropout = kMasked;
  causal.name = "Tq 130, Tk 150, D 64, causal", causal.causal = true;
  dropout.name = "dropout 0.3", dropout.p = 0.3;
  // D 7 and Dv 5: rows that do not start 16-byte aligned, staged element by element.
  const Problem odd{"D 7, Dv 5, causal", 1, 2, 9, 11, 7, 5, true};
  for (const Problem& p : {kMasked, kWide, kTiles, causal, dropout, odd})
    ExpectKernelsMatch<float, float>(p, 2e-5, "float", /*tiled=*/true);
  ExpectKernelsMatch<bf16, float>(kWide, 1e-2, "bfloat16", /*tiled=*/true);
}

// Dropout 0.3 over two query and two key tiles, causal with a mask: the forward's mask (drawn
// at the shifted offset) in out and in every gradient. The key the backward read says so too.
TEST(AttentionKernelsOnHost, DropoutUsesThePhiloxMaskOfTheShiftedKey) {
  Problem p = kMasked;
  p.name = "dropout 0.3";
  p.p = 0.3;
  ExpectKernelsMatch<float, float>(p, 2e-5, "float");
  ExpectKernelsMatch<double, double>(p, 1e-12, "double");
  // The factors differ from no dropout's: the check above can tell a mask from none.
  Problem none = p;
  none.p = 0;
  const Tensors t = InputsOf(p);
  const Values dropped = Reference(p, t)[0], kept = Reference(none, t)[0];
  double change = 0;
  for (size_t e = 0; e < kept.size(); ++e)
    change = std::max(change, std::abs(dropped[e] - kept[e]));
  EXPECT_GT(change, 0.05);
}

// bfloat16 data (inputs exact in it), float arithmetic: outputs rounded to 8 bits of mantissa.
TEST(AttentionKernelsOnHost, Bfloat16MatchesTheReferenceWithin16BitRounding) {
  ExpectKernelsMatch<bf16, float>(kWide, 1e-2, "bfloat16");
}

}  // namespace
}  // namespace weft::testing
