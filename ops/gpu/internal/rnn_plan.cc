#include "ops/gpu/internal/rnn_plan.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "core/env.h"
#include "core/error.h"
#include "core/mutex.h"
#include "core/no_destructor.h"
#include "ops/gpu/internal/rnn_gpu.h"
#include "ops/gpu/library_handles.h"

namespace weft::gpu {
namespace {

using DropoutDesc = CudnnDescriptor<cudnnDropoutDescriptor_t, cudnnCreateDropoutDescriptor,
                                    cudnnDestroyDropoutDescriptor>;

// Everything a plan depends on (the RNN descriptor holds the dropout descriptor, so it is a part).
using PlanKey = std::tuple<cudnnHandle_t, cudnnDropoutDescriptor_t, int, int, int, int64_t, int64_t,
                           int, int64_t, int64_t, double, bool, bool, bool>;

cudnnRNNMode_t CellOf(RnnMode mode) {
  switch (mode) {
    case RnnMode::kLstm:
      return CUDNN_LSTM;
    case RnnMode::kGru:
      return CUDNN_GRU;
    case RnnMode::kRnnTanh:
      return CUDNN_RNN_TANH;
    case RnnMode::kRnnRelu:
      return CUDNN_RNN_RELU;
  }
  WEFT_THROW("RNN: unknown mode");
}

// The algorithm, by PyTorch's rule for cuDNN's persistent small-H kernels (aten/src/ATen/native/
// cudnn/RNN.cpp): PERSIST_STATIC_SMALL_H on sm 6.0 and newer when H <= 128 (LSTM, GRU) or <= 256
// (tanh, relu), the limits of its backward (a plan serves forward and backward), not with sequence
// lengths (cuDNN does not support lengths that vary in a batch); STANDARD otherwise. Unlike
// PyTorch, only where reduced precision is allowed (bfloat16, or float32 with WEFT_GPU_TF32=1):
// its strict float32 differs from PyTorch's reference values more than the standard algorithm's
// (gpu_ops_rnn_test's errors with AlgoFor forced to the persistent algorithm for strict float32;
// bench/README.md has the figures). `allowed` false
// (WEFT_GPU_RNN_PERSISTENT=0): never. BuildPlan falls back to STANDARD where cuDNN reports
// NOT_SUPPORTED.
cudnnRNNAlgo_t AlgoFor(const RnnParam& p, const RnnDims& d, DType dtype, bool allowed) {
  const bool reduced = Is16BitFloat(dtype) || (dtype == DType::kFloat32 && AllowTf32());
  if (!reduced || !allowed) return CUDNN_RNN_ALGO_STANDARD;
  int device = 0, sm = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sm, cudaDevAttrComputeCapabilityMajor, device));
  const bool gated = p.mode == RnnMode::kLstm || p.mode == RnnMode::kGru;
  const bool small = d.h <= (gated ? 128 : 256);
  if (sm >= 6 && small && !p.use_sequence_length) return CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H;
  return CUDNN_RNN_ALGO_STANDARD;
}

void SetRnn(cudnnRNNDescriptor_t desc, const RnnParam& p, const RnnDims& d, DType dtype,
            cudnnDropoutDescriptor_t dropout, cudnnRNNAlgo_t algo) {
  const cudnnDataType_t type = CudnnType(dtype);
  // bfloat16 and float16 data compute in float32 on tensor cores. As PyTorch chooses for float32:
  // TF32 allowed is cuDNN's default math, strict is FMA only.
  const cudnnDataType_t prec = Is16BitFloat(dtype) ? CUDNN_DATA_FLOAT : type;
  const bool fma = dtype == DType::kFloat32 && !AllowTf32();
  WEFT_CUDNN_CHECK(cudnnSetRNNDescriptor_v8(
      desc, algo, CellOf(p.mode), CUDNN_RNN_DOUBLE_BIAS,
      d.dirs == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, type, prec,
      fma ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH, CheckedInt("RNN", d.i), CheckedInt("RNN", d.h),
      CheckedInt("RNN", d.h), d.layers, dropout, CUDNN_RNN_PADDED_IO_ENABLED));
}

// Where cuDNN puts the matrix and bias of gate `id` of pseudo-layer `pseudo`, in elements from
// the start of its weight space.
std::pair<int64_t, int64_t> SpaceOffsets(cudnnHandle_t h, const RnnPlan& plan, int pseudo, int id,
                                         size_t elem) {
  char* const base =
      reinterpret_cast<char*>(uintptr_t{1} << 30);  // never read: only offsets matter
  TensorDesc m, b;
  void *m_addr = nullptr, *b_addr = nullptr;
  WEFT_CUDNN_CHECK(cudnnGetRNNWeightParams(h, plan.rnn.get(), pseudo, plan.weight_bytes, base, id,
                                           m.get(), &m_addr, b.get(), &b_addr));
  return {(static_cast<char*>(m_addr) - base) / static_cast<int64_t>(elem),
          (static_cast<char*>(b_addr) - base) / static_cast<int64_t>(elem)};
}

// The copy runs of every tensor, merged where both sides are contiguous.
std::vector<CopyRun> RunsOf(cudnnHandle_t h, const RnnPlan& plan, const RnnParam& p,
                            const RnnDims& d, size_t elem) {
  const RnnParamLayout layout(p, d.i);
  std::vector<CopyRun> runs;
  auto add = [&runs](int64_t flat, int64_t space, int64_t count) {
    runs.push_back({flat, space, count});
  };
  for (int l = 0; l < d.layers; ++l) {
    for (int dir = 0; dir < d.dirs; ++dir) {
      const RnnBlock& blk = layout.Block(l, dir);
      for (int id = 0; id < 2 * d.gates; ++id) {
        const bool input = id < d.gates;
        const int gate = input ? id : id - d.gates;
        const int64_t cols = input ? blk.input : d.h;
        const auto [m, b] = SpaceOffsets(h, plan, l * d.dirs + dir, id, elem);
        add((input ? blk.weight_ih : blk.weight_hh) + gate * d.h * cols, m, d.h * cols);
        add((input ? blk.bias_ih : blk.bias_hh) + gate * d.h, b, d.h);
      }
    }
  }
  std::sort(runs.begin(), runs.end(),
            [](const CopyRun& a, const CopyRun& b) { return a.flat < b.flat; });
  std::vector<CopyRun> merged;
  for (const CopyRun& r : runs) {
    CopyRun* last = merged.empty() ? nullptr : &merged.back();
    if (last && last->flat + last->count == r.flat && last->space + last->count == r.space)
      last->count += r.count;
    else
      merged.push_back(r);
  }
  return merged;
}

void BuildPlan(cudnnHandle_t h, RnnPlan& plan, const RnnParam& p, const RnnDims& d, DType dtype,
               cudnnDropoutDescriptor_t dropout, bool persistent_allowed) {
  plan.algo = AlgoFor(p, d, dtype, persistent_allowed);
  SetRnn(plan.rnn.get(), p, d, dtype, dropout, plan.algo);
  const std::vector<int32_t> all(d.n, static_cast<int32_t>(d.t));
  SetData(plan.x.get(), dtype, d, d.i, all);
  SetData(plan.y.get(), dtype, d, d.dirs * d.h, all);
  const int dims[3] = {d.layers * d.dirs, CheckedInt("RNN", d.n), CheckedInt("RNN", d.h)};
  const int strides[3] = {dims[1] * dims[2], dims[2], 1};
  WEFT_CUDNN_CHECK(cudnnSetTensorNdDescriptor(plan.h.get(), CudnnType(dtype), 3, dims, strides));
  auto sizes = [&] {
    return cudnnGetRNNTempSpaceSizes(h, plan.rnn.get(), CUDNN_FWD_MODE_TRAINING, plan.x.get(),
                                     &plan.work_bytes, &plan.reserve_bytes);
  };
  cudnnStatus_t status = sizes();
  if (status == CUDNN_STATUS_NOT_SUPPORTED && plan.algo != CUDNN_RNN_ALGO_STANDARD) {
    plan.algo = CUDNN_RNN_ALGO_STANDARD;
    SetRnn(plan.rnn.get(), p, d, dtype, dropout, plan.algo);
    status = sizes();
  }
  WEFT_CUDNN_CHECK(status);
  WEFT_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(h, plan.rnn.get(), &plan.weight_bytes));
  const size_t elem = DTypeSize(dtype);
  plan.runs = RunsOf(h, plan, p, d, elem);
  const int64_t total = RnnParamLayout(p, d.i).size();
  plan.zero_copy = plan.runs.size() == 1 && plan.runs[0].flat == 0 && plan.runs[0].space == 0 &&
                   plan.runs[0].count == total && plan.weight_bytes == total * elem;
}

}  // namespace

void SetData(cudnnRNNDataDescriptor_t desc, DType dtype, const RnnDims& d, int64_t vector,
             const std::vector<int32_t>& lengths) {
  double fill64 = 0;
  float fill32 = 0;
  void* fill = dtype == DType::kFloat64 ? static_cast<void*>(&fill64) : static_cast<void*>(&fill32);
  WEFT_CUDNN_CHECK(cudnnSetRNNDataDescriptor(
      desc, CudnnType(dtype), CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, CheckedInt("RNN", d.t),
      CheckedInt("RNN", d.n), CheckedInt("RNN", vector), lengths.data(), fill));
}

// The plan of this handle and call shape, built on first use; plans live for the process. The key
// holds what AlgoFor reads, so the device is asked for its architecture only when a plan is built.
const RnnPlan& PlanOf(cudnnHandle_t h, const RnnParam& p, const RnnDims& d, DType dtype,
                      cudnnDropoutDescriptor_t dropout) {
  static Mutex mu;                                         // guards plans
  static NoDestructor<std::map<PlanKey, RnnPlan*>> plans;  // like the handles
  const bool persistent = GetEnvBool("WEFT_GPU_RNN_PERSISTENT", true);
  const PlanKey key{h,
                    dropout,
                    static_cast<int>(dtype),
                    static_cast<int>(p.mode),
                    d.layers,
                    d.i,
                    d.h,
                    d.dirs,
                    d.t,
                    d.n,
                    p.p,
                    AllowTf32(),
                    p.use_sequence_length,
                    persistent};
  {
    MutexLock lock(&mu);
    const auto it = plans->find(key);
    if (it != plans->end()) return *it->second;
  }
  auto* plan = new RnnPlan;
  BuildPlan(h, *plan, p, d, dtype, dropout, persistent);
  MutexLock lock(&mu);
  const auto [it, added] = plans->emplace(key, plan);
  if (!added) delete plan;
  return *it->second;
}

// A dropout descriptor of probability p with no random state: enough for sizes.
cudnnDropoutDescriptor_t StatelessDropout(cudnnHandle_t h, double p) {
  static Mutex mu;
  static NoDestructor<std::map<std::pair<cudnnHandle_t, double>, DropoutDesc*>> descs;
  MutexLock lock(&mu);
  DropoutDesc*& desc = (*descs)[{h, p}];
  if (desc == nullptr) {
    desc = new DropoutDesc;
    WEFT_CUDNN_CHECK(
        cudnnSetDropoutDescriptor(desc->get(), h, static_cast<float>(p), nullptr, 0, 0));
  }
  return desc->get();
}

namespace {

// One stream's random state for cuDNN's dropout, and its descriptors by probability.
struct StreamDropoutState {
  void* states = nullptr;
  size_t bytes = 0;
  uint64_t seed = 0;
  std::map<double, DropoutDesc*> descs;
};

Mutex dropout_mu;
NoDestructor<std::map<cudaStream_t, StreamDropoutState>> dropout_states WEFT_GUARDED_BY(dropout_mu);

}  // namespace

// The state is initialized by a kernel on h's stream (cudnnSetDropoutDescriptor); a descriptor for
// another probability is restored onto it (no kernel). A stream's calls run in its order, so the
// state is never read and advanced by two at once, which one state per device shared by every
// stream (before) allowed. The seed is the first call's, mixed with the count of states made
// before, so two streams do not draw the same masks. A destroyed stream's state stays with its
// address: a stream made later at that address reuses it after the old stream's work, which was
// waited for when it was destroyed.
cudnnDropoutDescriptor_t StreamDropout(cudnnHandle_t h, cudaStream_t stream, double p,
                                       uint64_t seed) {
  if (p == 0) return StatelessDropout(h, 0);
  MutexLock lock(&dropout_mu);
  const size_t made = dropout_states->size();
  StreamDropoutState& s = (*dropout_states)[stream];
  DropoutDesc*& desc = s.descs[p];
  if (desc != nullptr) return desc->get();
  desc = new DropoutDesc;
  if (s.states == nullptr) {
    WEFT_CUDNN_CHECK(cudnnDropoutGetStatesSize(h, &s.bytes));
    WEFT_CUDA_CHECK(cudaMalloc(&s.states, s.bytes));  // immortal, like the handles
    s.seed = seed + 0x9e3779b97f4a7c15ull * made;
    WEFT_CUDNN_CHECK(cudnnSetDropoutDescriptor(desc->get(), h, static_cast<float>(p), s.states,
                                               s.bytes, s.seed));
  } else {
    WEFT_CUDNN_CHECK(cudnnRestoreDropoutDescriptor(desc->get(), h, static_cast<float>(p), s.states,
                                                   s.bytes, s.seed));
  }
  return desc->get();
}

const void* RnnDropoutState(cudaStream_t stream) {
  MutexLock lock(&dropout_mu);
  const auto it = dropout_states->find(stream);
  return it == dropout_states->end() ? nullptr : it->second.states;
}

// A handle of the current device for size queries (shape inference runs outside any stream).
cudnnHandle_t QueryHandle() {
  static Mutex mu;
  static NoDestructor<std::map<int, cudnnHandle_t>> handles;
  int device = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  MutexLock lock(&mu);
  cudnnHandle_t& h = (*handles)[device];
  if (h == nullptr) WEFT_CUDNN_CHECK(cudnnCreate(&h));
  return h;
}

}  // namespace weft::gpu
