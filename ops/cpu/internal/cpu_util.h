// Helpers for CPU operator kernels: intra-op parallelism sized so that engine workers times
// intra-op threads does not exceed the cores, output requests, and shape checks.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/bfloat16.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/tensor_view.h"
#include "ops/internal/op_util.h"
#include "ops/op.h"

namespace weft::cpu {

// Threads each op may use inside itself: WEFT_CPU_OP_THREADS, by default the cores divided by
// the engine's CPU workers (at least 1).
int IntraOpThreads();

// The grain (items per chunk) for ParallelFor over items of about `work_per_item` operations each:
// a chunk at least kMinChunkWork operations, below which an OpenMP team's fork and join (5 to 10
// us for two threads on these machines) costs more than splitting saves.
inline constexpr int64_t kMinChunkWork = int64_t{1} << 16;
inline int64_t GrainFor(int64_t work_per_item) {
  return std::max<int64_t>(1, kMinChunkWork / std::max<int64_t>(1, work_per_item));
}

// Runs f(begin, end) over [0, n) in chunks of at least `grain`, on IntraOpThreads() threads (the
// calling worker's OpenMP team, which oneDNN's primitives use too).
// Small ranges (and one thread) run inline, with no type erasure or allocation.
void ParallelForSplit(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f);
template <typename F>
inline void ParallelFor(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  if (n <= grain || IntraOpThreads() == 1) {
    f(int64_t{0}, n);
    return;
  }
  ParallelForSplit(n, grain, f);
}

// Sets the calling thread's OpenMP thread count (oneDNN's runtime in Debian's build) to
// IntraOpThreads(); cheap after the first call on a thread.
void ConfigureOpenMPForThisThread();

// Stores `value` into `out` as the request says.
template <typename T>
inline void Store(T& out, OpReq req, T value) {
  if (req == OpReq::kAddTo) {
    out += value;
  } else if (req != OpReq::kNull) {
    out = value;
  }
}

// Marks a kernel loop's function (a template is fine) to be compiled for AVX-512, for AVX2 and for
// the build's baseline (-march), the widest the processor has being picked when the program loads
// (GCC's target_clones, an ifunc). The ops are compiled without contraction into FMA (ops/BUILD:
// AVX-512 has FMA for vectors), so each clone performs the same IEEE operations in each lane, 16,
// 8 or 4 at a time, and computes the same bits: results do not depend on the processor, and the
// fused tiles, which call the same loops, equal the unfused ops bit for bit. Plain functions
// under clang (which clones no templates), the sanitizers (an ifunc resolver runs before their
// runtime) and off x86-64.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define WEFT_CPU_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define WEFT_CPU_VECTOR_CLONES
#endif

// The arithmetic type of elements of type T: float for bfloat16 (loaded exactly, stored rounded
// to nearest even, as on the GPU), T itself otherwise.
template <typename T>
using ArithOf = std::conditional_t<std::is_same_v<T, BFloat16>, float, T>;
template <typename T>
ArithOf<T> ToArith(T v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return v.ToFloat();
  } else {
    return v;
  }
}
template <typename T>
T FromArith(ArithOf<T> v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16::FromFloat(v);
  } else {
    return v;
  }
}

// Stores v, computed in ArithOf<T>, into out as the request says, rounding once: a kAddTo adds
// what out holds before rounding (where Store adds two values of T, for bfloat16 a second
// rounding).
template <typename T>
inline void StoreArith(T& out, OpReq req, ArithOf<T> v) {
  if (req == OpReq::kNull) return;
  out = FromArith<T>(req == OpReq::kAddTo ? ToArith(out) + v : v);
}

// bfloat16 <-> float32 over n elements, in vectors (cpu_util.cc; five times the scalar loops'
// speed). Narrowing rounds once, a kAddTo after adding in float.
void WidenBf16(const BFloat16* in, float* out, int64_t n);
void NarrowBf16(const float* in, OpReq req, BFloat16* out, int64_t n);

// bfloat16 elementwise work through a float32 loop: elements [b, e) in blocks that stay in L1,
// each block's N bfloat16 inputs widened into float buffers, `kernel(const float* const* in,
// float* const* out, n)` (the float32 loop, writing its M outputs) run on them, and each result
// stored rounded once as its request says (none for kNull). Every input of a block is widened
// before any output of it is stored, so an output may be an input. The same functor on the same
// (exact) values as a float loop: the same results.
template <size_t N, size_t M, typename Kernel>
void Bf16BlocksTo(const std::array<const BFloat16*, N>& in, const std::array<OpReq, M>& req,
                  const std::array<BFloat16*, M>& out, int64_t b, int64_t e, Kernel&& kernel) {
  constexpr int64_t kBlock = 512;
  float widened[N == 0 ? 1 : N][kBlock], result[M][kBlock];
  for (int64_t s = b; s < e; s += kBlock) {
    const int64_t n = std::min(kBlock, e - s);
    const float* ins[N == 0 ? 1 : N];
    float* outs[M];
    for (size_t k = 0; k < N; ++k) {
      WidenBf16(in[k] + s, widened[k], n);
      ins[k] = widened[k];
    }
    for (size_t k = 0; k < M; ++k) outs[k] = result[k];
    kernel(static_cast<const float* const*>(ins), static_cast<float* const*>(outs), n);
    for (size_t k = 0; k < M; ++k)
      if (req[k] != OpReq::kNull) NarrowBf16(result[k], req[k], out[k] + s, n);
  }
}

// The same with one output: `kernel(const float* const* in, float* out, n)`.
template <size_t N, typename Kernel>
void Bf16Blocks(const std::array<const BFloat16*, N>& in, OpReq req, BFloat16* out, int64_t b,
                int64_t e, Kernel&& kernel) {
  Bf16BlocksTo<N, 1>(
      in, {req}, {out}, b, e,
      [&](const float* const* ins, float* const* outs, int64_t n) { kernel(ins, outs[0], n); });
}

// SWITCH (WEFT_FLOAT_SWITCH or WEFT_DTYPE_SWITCH) with bfloat16 too.
#define WEFT_WITH_BF16(SWITCH, dtype, T, what, ...) \
  if ((dtype) == ::weft::DType::kBFloat16) {        \
    using T = ::weft::BFloat16;                     \
    __VA_ARGS__;                                    \
  } else {                                          \
    SWITCH(dtype, T, what, __VA_ARGS__);            \
  }
// For ops that compute: bfloat16 in float (ArithOf).
#define WEFT_FLOAT_BF16_SWITCH(dtype, T, what, ...) \
  WEFT_WITH_BF16(WEFT_FLOAT_SWITCH, dtype, T, what, __VA_ARGS__)
// For ops that move elements without arithmetic (copies, transposes), whose kAddTo sums a
// bfloat16 pair in float32 (BFloat16::operator+=).
#define WEFT_MOVE_SWITCH(dtype, T, what, ...) \
  WEFT_WITH_BF16(WEFT_DTYPE_SWITCH, dtype, T, what, __VA_ARGS__)

// Stores f(i) into out[i] for i in [begin, end) as the request says. The request is checked once,
// outside the loop, and the loop is marked for SIMD: f(i) may read out[i] itself (in place) but
// no other element of it, so the lanes are independent. (Left to itself, GCC keeps such loops
// scalar when it cannot prove the arrays apart, with a mispredicted branch per element in masked
// loops such as relu's gradient: 30 times slower.)
template <typename T, typename F>
inline void StoreRange(T* out, OpReq req, int64_t begin, int64_t end, F&& f) {
  switch (req) {
    case OpReq::kNull:
      return;
    case OpReq::kAddTo:
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) out[i] += f(i);
      return;
    default:
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) out[i] = f(i);
      return;
  }
}

// Stores in[0, n) into out[0, n) as the request says. A kWriteInplace onto the same memory is
// already done; the ranges must not overlap otherwise.
template <typename T>
inline void StoreN(T* out, OpReq req, const T* in, int64_t n) {
  if (req == OpReq::kNull || (req == OpReq::kWriteInplace && out == in)) return;
  if (req == OpReq::kAddTo) {
    for (int64_t i = 0; i < n; ++i) out[i] += in[i];
  } else {
    std::copy(in, in + n, out);
  }
}

// Stores n values computed in ArithOf<T> into out as the request says, rounded once (a kAddTo
// adds in the arithmetic type first).
template <typename T>
inline void StoreArithN(T* out, OpReq req, const ArithOf<T>* in, int64_t n) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    NarrowBf16(in, req, out, n);
  } else {
    StoreN(out, req, in, n);
  }
}

// How StagedOutputs stages a bfloat16 output whose request is kAddTo: kRounded, in bfloat16 (the
// kernel's result is rounded, then Finish rounds the sum again); kInFloat, in float32 (the kernel
// writes its result unrounded, Finish adds it in float and rounds once), for kernels that can
// write float32, as oneDNN's bfloat16 primitives can.
enum class Bf16AddTo { kRounded, kInFloat };

// The dtype of StagedOutputs' Target for an output of `dtype` and request `req`: float32 for a
// bfloat16 kAddTo staged kInFloat, else `dtype`. A kernel that makes its primitives before its
// StagedOutputs (to size the scratch) types their outputs with it.
inline DType StagedType(DType dtype, OpReq req, Bf16AddTo adds) {
  const bool in_float =
      dtype == DType::kBFloat16 && req == OpReq::kAddTo && adds == Bf16AddTo::kInFloat;
  return in_float ? DType::kFloat32 : dtype;
}

// Where a kernel writes its outputs, and how each result then reaches its output as the request
// says. The kernel overwrites Target(i) with output i. Outputs with req kWrite, and kWriteInplace
// when the kernel tolerates its output aliasing an input (`inplace_ok`), are their own target;
// the others get scratch memory: Finish() adds a kAddTo result to what the output holds, copies an
// aliasing kWriteInplace result, and drops a kNull one (so a kernel that computes several outputs
// at once need not special-case the ones nobody wants). The workspace is requested once for the
// scratch and for `extra_bytes` (the kernel's own temporaries, Extra(j)), because ctx.Workspace
// keeps only its latest buffer valid. Every part is 64-byte aligned. Outputs are float32, float64
// or bfloat16 (whose kAddTo sums in float32, staged as `adds` says).
//
//   StagedOutputs out(ctx, req, outputs, /*inplace_ok=*/false, {tmp_bytes});
//   Kernel(in, out.Target(0).data<float>(), out.Extra(0));
//   out.Finish();
class StagedOutputs {
 public:
  StagedOutputs(const OpContext& ctx, std::span<const OpReq> req,
                std::span<const TensorView> outputs, bool inplace_ok,
                std::initializer_list<size_t> extra_bytes = {},
                Bf16AddTo adds = Bf16AddTo::kRounded)
      : StagedOutputs(ctx, req, outputs, inplace_ok,
                      std::span<const size_t>(extra_bytes.begin(), extra_bytes.size()), adds) {}
  StagedOutputs(const OpContext& ctx, std::span<const OpReq> req,
                std::span<const TensorView> outputs, bool inplace_ok,
                std::span<const size_t> extra_bytes, Bf16AddTo adds = Bf16AddTo::kRounded);
  const TensorView& Target(int i) const { return targets_[i]; }
  // Whether anyone reads output i (its req is not kNull).
  bool Needed(int i) const { return req_[i] != OpReq::kNull; }
  void* Extra(int j) const { return extras_[j]; }
  void Finish() const;

 private:
  std::span<const OpReq> req_;
  std::span<const TensorView> outputs_;
  std::vector<TensorView> targets_;
  std::vector<void*> extras_;
};

// log(sum_i exp(x[i * stride])) over n >= 1 values, in ArithOf<T>; the largest value is
// subtracted before exp, so large logits do not overflow.
template <typename T>
ArithOf<T> LogSumExp(const T* x, int64_t n, int64_t stride) {
  ArithOf<T> max = ToArith(x[0]);
  for (int64_t i = 1; i < n; ++i) max = std::max(max, ToArith(x[i * stride]));
  ArithOf<T> sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(ToArith(x[i * stride]) - max);
  return max + std::log(sum);
}

}  // namespace weft::cpu
