// LayerNorm's GPU kernels (ops/gpu/kernels/layer_norm.cuh) run on the host through
// tests/kernel_host_shim.h, against a plain float64 reference: the forward's y, mean and rstd, the
// backward's d_x (written and added) and the parameter gradients that LnParamGradSum adds up from
// the blocks' partial rows, in float and bfloat16 data; the warp kernels (a row in a warp's
// registers, the backward loading its next row while it computes one) with fewer warps than rows,
// so each warp takes several rows and some none past the end, and the block kernels on rows that
// are not contiguous (a middle axis). No GPU needed: this runs in every build; gpu_ops_norm_test
// checks the same kernels on a GPU against the CPU's op.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/op_test_util.h"

// The shim before the kernels: it defines what they use of CUDA.
// clang-format off
#include "tests/kernel_host_shim.h"
#include "ops/gpu/kernels/layer_norm.cuh"
#include "tests/kernel_host_values.h"
// clang-format on

namespace weft::testing {
namespace {

constexpr float kEps = 1e-5f;

// (outer, c, inner): rows of c values `inner` apart, as layer_norm.cuh sees them.
struct Problem {
  std::string name;
  int64_t outer, c, inner;
  int64_t rows() const { return outer * inner; }
  int64_t size() const { return outer * c * inner; }
  int64_t At(int64_t r, int64_t j) const { return (r / inner) * c * inner + j * inner + r % inner; }
};

// n values in [-1, 1), multiples of 1/128 (exact in bfloat16), from `seed`.
Values BfExact(int64_t n, uint64_t seed) {
  Values v(n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (double& e : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    e = static_cast<double>(static_cast<int64_t>(s >> 40) % 256) / 128.0 - 1;
  }
  return v;
}

struct Reference {
  Values y, mean, rstd, dx, d_gamma, d_beta;
};

Reference ReferenceOf(const Problem& p, const Values& x, const Values& gamma, const Values& beta,
                      const Values& dy) {
  Reference r{Values(p.size()), Values(p.rows()), Values(p.rows()),
              Values(p.size()), Values(p.c),      Values(p.c)};
  for (int64_t row = 0; row < p.rows(); ++row) {
    double sum = 0, squares = 0;
    for (int64_t j = 0; j < p.c; ++j) sum += x[p.At(row, j)];
    const double m = sum / p.c;
    for (int64_t j = 0; j < p.c; ++j) squares += (x[p.At(row, j)] - m) * (x[p.At(row, j)] - m);
    const double rs = 1 / std::sqrt(squares / p.c + kEps);
    r.mean[row] = m, r.rstd[row] = rs;
    double a = 0, b = 0;
    for (int64_t j = 0; j < p.c; ++j) {
      const double x_hat = (x[p.At(row, j)] - m) * rs, d = dy[p.At(row, j)];
      r.y[p.At(row, j)] = x_hat * gamma[j] + beta[j];
      a += d * gamma[j] / p.c, b += d * gamma[j] * x_hat / p.c;
      r.d_gamma[j] += d * x_hat, r.d_beta[j] += d;
    }
    for (int64_t j = 0; j < p.c; ++j) {
      const double x_hat = (x[p.At(row, j)] - m) * rs;
      r.dx[p.At(row, j)] = rs * (dy[p.At(row, j)] * gamma[j] - a - x_hat * b);
    }
  }
  return r;
}

// Forward, then backward into d_x = `dx0` with kReqAdd (the reference adds dx0), then the
// parameter sums, d_gamma written and d_beta added to `beta0`; the kernels the launch would pick
// (the warp ones for contiguous rows), with `warp_blocks` blocks for the warp backward.
template <typename T, int kPacks>
void Check(const Problem& p, int64_t warp_blocks, double tol) {
  const Values x = BfExact(p.size(), 1), dy = BfExact(p.size(), 2), dx0 = BfExact(p.size(), 3);
  Values gamma = BfExact(p.c, 4), beta = BfExact(p.c, 5), beta0 = BfExact(p.c, 6);
  for (double& g : gamma) g += 1.5;
  const Reference want = ReferenceOf(p, x, gamma, beta, dy);
  std::vector<T> xs = As<T>(x), dys = As<T>(dy), y(p.size()), dx = As<T>(dx0);
  std::vector<float> g(gamma.begin(), gamma.end()), b(beta.begin(), beta.end());
  std::vector<float> mean(p.rows()), rstd(p.rows()), d_gamma(p.c, 99.0f);
  std::vector<float> d_beta(beta0.begin(), beta0.end());
  const bool warp = p.inner == 1;
  const int64_t blocks = warp ? warp_blocks : std::min<int64_t>(p.rows(), 10);
  std::vector<float> partial(blocks * 2 * p.c, -7.0f);
  const int64_t rows = p.rows();
  if (warp) {
    HostLaunch(static_cast<unsigned>(blocks), kGpuBlock, [&] {
      LnForwardWarp<T, T, kPacks>(xs.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(),
                                  rows, p.c, kEps, kReqWrite, kReqWrite, kReqWrite);
    });
    HostLaunch(static_cast<unsigned>(blocks), kGpuBlock, [&] {
      LnBackwardWarp<T, T, kPacks>(dys.data(), xs.data(), g.data(), mean.data(), rstd.data(),
                                   dx.data(), partial.data(), rows, p.c, kReqAdd);
    });
  } else {
    HostLaunch(static_cast<unsigned>(blocks), kGpuBlock, [&] {
      LnForward<T, T>(xs.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, p.c,
                      p.inner, kEps, kReqWrite, kReqWrite, kReqWrite);
    });
    HostLaunch(static_cast<unsigned>(blocks), kGpuBlock, [&] {
      LnBackward<T, T>(dys.data(), xs.data(), g.data(), mean.data(), rstd.data(), dx.data(),
                       partial.data(), rows, p.c, p.inner, kReqAdd);
    });
  }
  const auto sum_blocks = static_cast<unsigned>((2 * p.c + kLnSumColumns - 1) / kLnSumColumns);
  HostLaunch(sum_blocks, kGpuBlock, [&] {
    LnParamGradSum(partial.data(), blocks, p.c, d_gamma.data(), d_beta.data(), kReqWrite, kReqAdd);
  });
  Values want_dx = want.dx, want_d_beta = want.d_beta;
  for (size_t i = 0; i < want_dx.size(); ++i) want_dx[i] += Back(As<T>(dx0))[i];
  for (int64_t j = 0; j < p.c; ++j) want_d_beta[j] += beta0[j];
  ExpectNear(Back(y), want.y, tol, p.name + ": y");
  ExpectNear(Values(mean.begin(), mean.end()), want.mean, 1e-5, p.name + ": mean");
  ExpectNear(Values(rstd.begin(), rstd.end()), want.rstd, 1e-4, p.name + ": rstd");
  ExpectNear(Back(dx), want_dx, tol, p.name + ": d_x");
  ExpectNear(Values(d_gamma.begin(), d_gamma.end()), want.d_gamma, 1e-4 * p.rows(),
             p.name + ": d_gamma");
  ExpectNear(Values(d_beta.begin(), d_beta.end()), want_d_beta, 1e-4 * p.rows(),
             p.name + ": d_beta");
}

// 2 blocks of 8 warps over 37 rows: warps take 3 rows or 2, the next row's loads past the end
// skipped; c 96 in bfloat16 packs of 8 leaves lanes 12..31 without values. Then 11 blocks, so
// LnParamGradSum's 8 slices each add more than one partial row.
TEST(LayerNormKernelsOnTheHost, WarpKernelsInBfloat16) {
  Check<bf16, 1>({"warp, bf16, c 96", 37, 96, 1}, 2, 3e-2);
  Check<bf16, 1>({"warp, bf16, c 96, 11 blocks", 150, 96, 1}, 11, 3e-2);
}

// c 520 in float packs of 4: 130 packs, a lane's fifth pack only for lanes 0 and 1; one block
// of 8 warps over 21 rows (2 or 3 rows a warp); and a single block on more rows than warps twice.
TEST(LayerNormKernelsOnTheHost, WarpKernelsInFloat) {
  Check<float, 5>({"warp, float, c 520", 21, 520, 1}, 1, 1e-4);
  Check<float, 1>({"warp, float, c 64", 19, 64, 1}, 1, 1e-4);
}

// Rows along a middle axis: the block kernels, 10 blocks over 14 rows (grid-strided).
TEST(LayerNormKernelsOnTheHost, BlockKernelsOnStridedRows) {
  Check<float, 1>({"block, float, (2, 40, 7)", 2, 40, 7}, 0, 1e-4);
}

}  // namespace
}  // namespace weft::testing
