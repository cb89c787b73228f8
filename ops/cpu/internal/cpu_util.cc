#include "ops/cpu/internal/cpu_util.h"

#include <omp.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "core/bfloat16.h"
#include "core/env.h"
#include "engine/engine.h"

namespace weft::cpu {

// Over the bits (uint16_t): GCC vectorizes neither loop over the BFloat16 struct.
WEFT_CPU_VECTOR_CLONES void WidenBf16(const BFloat16* in, float* out, int64_t n) {
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(in);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = BFloat16::FloatOfBits(bits[i]);
}

WEFT_CPU_VECTOR_CLONES void NarrowBf16(const float* in, OpReq req, BFloat16* out, int64_t n) {
  uint16_t* bits = reinterpret_cast<uint16_t*>(out);
  if (req == OpReq::kAddTo) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      bits[i] = BFloat16::RoundedBits(BFloat16::FloatOfBits(bits[i]) + in[i]);
  } else if (req != OpReq::kNull) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) bits[i] = BFloat16::RoundedBits(in[i]);
  }
}

int IntraOpThreads() {
  static const int threads = [] {
    const int workers = engine::EngineOptions::FromEnv().cpu_workers;
    return GetEnvInt("WEFT_CPU_OP_THREADS", std::max(1, NumCores() / std::max(1, workers)), 1,
                     1024);
  }();
  return threads;
}

// Parallel loops run on the OpenMP team of the calling worker, the same threads oneDNN's
// primitives use (Debian's oneDNN is built on OpenMP). A second pool (oneTBB's) beside it was
// slower on two cores: each pool's idle threads spin while the other's work (train_bench's
// 784-1024-1024-10 MLP step; bench/README.md has the figures).
void ParallelForSplit(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  ConfigureOpenMPForThisThread();
  const int64_t chunks =
      std::min<int64_t>(IntraOpThreads(), (n + grain - 1) / std::max<int64_t>(grain, 1));
#pragma omp parallel for num_threads(static_cast <int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) f(n * c / chunks, n * (c + 1) / chunks);
}

void ConfigureOpenMPForThisThread() {
  thread_local bool configured = false;
  if (!configured) {
    omp_set_num_threads(IntraOpThreads());
    configured = true;
  }
}

namespace {

constexpr size_t kPartAlignment = 64;  // what oneDNN wants, and a cache line

// Splits one workspace request into parts of the given sizes; a part of size 0 is null.
std::vector<void*> SplitWorkspace(const OpContext& ctx, const std::vector<size_t>& sizes) {
  size_t total = 0;
  for (size_t s : sizes) total += (s + kPartAlignment - 1) / kPartAlignment * kPartAlignment;
  std::vector<void*> parts(sizes.size(), nullptr);
  if (total == 0) return parts;
  char* next = static_cast<char*>(ctx.Workspace(total));  // 64-byte aligned (storage/storage.h)
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) continue;
    parts[i] = next;
    next += (sizes[i] + kPartAlignment - 1) / kPartAlignment * kPartAlignment;
  }
  return parts;
}

}  // namespace

StagedOutputs::StagedOutputs(const OpContext& ctx, std::span<const OpReq> req,
                             std::span<const TensorView> outputs, bool inplace_ok,
                             std::span<const size_t> extra_bytes, Bf16AddTo adds)
    : req_(req), outputs_(outputs), targets_(outputs.begin(), outputs.end()) {
  auto staged = [&](size_t i) {
    return req[i] == OpReq::kAddTo || req[i] == OpReq::kNull ||
           (req[i] == OpReq::kWriteInplace && !inplace_ok);
  };
  auto type = [&](size_t i) { return StagedType(outputs[i].dtype(), req[i], adds); };
  std::vector<size_t> sizes;
  for (size_t i = 0; i < outputs.size(); ++i)
    sizes.push_back(staged(i) ? static_cast<size_t>(outputs[i].size()) * DTypeSize(type(i)) : 0);
  sizes.insert(sizes.end(), extra_bytes.begin(), extra_bytes.end());
  const std::vector<void*> parts = SplitWorkspace(ctx, sizes);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (staged(i))
      targets_[i] = TensorView(parts[i], outputs[i].shape(), type(i), outputs[i].device());
  }
  extras_.assign(parts.begin() + static_cast<std::ptrdiff_t>(outputs.size()), parts.end());
}

namespace {

// StoreN for bfloat16: a kAddTo sums in float32 and rounds once (a result staged in float32, by
// Bf16AddTo::kInFloat, is rounded only there).
void StoreBf16(const TensorView& from, OpReq req, const TensorView& to) {
  auto* dst = static_cast<BFloat16*>(to.raw());
  ParallelFor(to.size(), 4096, [&](int64_t b, int64_t e) {
    if (from.dtype() == DType::kFloat32)
      return NarrowBf16(from.data<float>() + b, req, dst + b, e - b);
    const auto* src = static_cast<const BFloat16*>(from.raw());
    for (int64_t i = b; i < e; ++i) {
      dst[i] =
          req == OpReq::kAddTo ? BFloat16::FromFloat(dst[i].ToFloat() + src[i].ToFloat()) : src[i];
    }
  });
}

}  // namespace

void StagedOutputs::Finish() const {
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const OpReq req = req_[i];
    if (req == OpReq::kNull || targets_[i].raw() == outputs_[i].raw()) continue;
    if (outputs_[i].dtype() == DType::kBFloat16) {
      StoreBf16(targets_[i], req, outputs_[i]);
      continue;
    }
    WEFT_FLOAT_SWITCH(outputs_[i].dtype(), T, "storing an op's output", {
      const T* src = targets_[i].data<T>();
      T* dst = outputs_[i].data<T>();
      ParallelFor(outputs_[i].size(), 4096,
                  [&](int64_t b, int64_t e) { StoreN(dst + b, req, src + b, e - b); });
    });
  }
}

}  // namespace weft::cpu
