// Convolution and _backward_Convolution on the GPU, through cuDNN's convolution API
// (ops/nn/convolution.cc says what they compute). float32 and float64; float32 runs FMA kernels
// only (no TF32), so it matches the CPU's float32.
//
// Algorithms: cudnnGet*Algorithm_v7 ranks them by cuDNN's heuristics without running anything (the
// Find* calls would time them, which synchronizes and allocates outside weft's pools); the first
// one that supports the call and keeps to FMA math is taken, once per (direction, shape, window,
// dtype, device), and remembered for the process. Its workspace comes from ctx.Workspace.
// Bias: cudnnAddTensor forward, cudnnConvolutionBackwardBias backward.
#include <map>
#include <mutex>
#include <span>
#include <tuple>
#include <vector>

#include "core/mutex.h"
#include "core/no_destructor.h"
#include "ops/gpu/internal/cudnn_desc.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

constexpr std::initializer_list<DType> kConvTypes = {DType::kFloat32, DType::kFloat64};

// The descriptors of one call: data x (N, C, H, W), weight w (F, C, kh, kw), output y
// (N, F, OH, OW), and the convolution.
struct ConvDescs {
  TensorDesc x, y;
  FilterDesc w;
  ConvolutionDesc conv;
};

ConvDescs DescsOf(DType dtype, const Window2d& win, const ConvDims& d) {
  const char* op = "Convolution";
  const Geometry2d& g = d.g;
  return {NchwDesc(op, dtype, Shape{g.n, g.c, g.h, g.w}),
          NchwDesc(op, dtype, Shape{g.n, d.f, g.oh, g.ow}),
          FilterOf(op, dtype, Shape{d.f, g.c, win.kernel[0], win.kernel[1]}),
          ConvolutionOf(dtype, win)};
}

// What each direction's algorithm query and workspace size call are; the queries take the
// descriptors in different orders.
struct Forward {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  static constexpr const char* kName = "forward";
  static cudnnStatus_t MaxCount(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionForwardAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t Query(cudnnHandle_t h, const ConvDescs& c, int n, int* got, Perf* perf) {
    return cudnnGetConvolutionForwardAlgorithm_v7(h, c.x.get(), c.w.get(), c.conv.get(), c.y.get(),
                                                  n, got, perf);
  }
  static cudnnStatus_t WorkspaceSize(cudnnHandle_t h, const ConvDescs& c,
                                     cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, c.x.get(), c.w.get(), c.conv.get(), c.y.get(),
                                                   algo, bytes);
  }
  // first: x, second: w -> y
  static cudnnStatus_t Run(cudnnHandle_t h, const ConvDescs& c, const void* alpha,
                           const void* first, const void* second, cudnnConvolutionFwdAlgo_t algo,
                           void* ws, size_t bytes, const void* beta, void* out) {
    return cudnnConvolutionForward(h, alpha, c.x.get(), first, c.w.get(), second, c.conv.get(),
                                   algo, ws, bytes, beta, c.y.get(), out);
  }
};

struct BackwardData {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  static constexpr const char* kName = "backward data";
  static cudnnStatus_t MaxCount(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t Query(cudnnHandle_t h, const ConvDescs& c, int n, int* got, Perf* perf) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c.w.get(), c.y.get(), c.conv.get(),
                                                       c.x.get(), n, got, perf);
  }
  static cudnnStatus_t WorkspaceSize(cudnnHandle_t h, const ConvDescs& c,
                                     cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, c.w.get(), c.y.get(), c.conv.get(),
                                                        c.x.get(), algo, bytes);
  }
  // first: w, second: dy -> dx
  static cudnnStatus_t Run(cudnnHandle_t h, const ConvDescs& c, const void* alpha,
                           const void* first, const void* second,
                           cudnnConvolutionBwdDataAlgo_t algo, void* ws, size_t bytes,
                           const void* beta, void* out) {
    return cudnnConvolutionBackwardData(h, alpha, c.w.get(), first, c.y.get(), second, c.conv.get(),
                                        algo, ws, bytes, beta, c.x.get(), out);
  }
};

struct BackwardFilter {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  static constexpr const char* kName = "backward filter";
  static cudnnStatus_t MaxCount(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t Query(cudnnHandle_t h, const ConvDescs& c, int n, int* got, Perf* perf) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c.x.get(), c.y.get(), c.conv.get(),
                                                         c.w.get(), n, got, perf);
  }
  static cudnnStatus_t WorkspaceSize(cudnnHandle_t h, const ConvDescs& c,
                                     cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c.x.get(), c.y.get(), c.conv.get(),
                                                          c.w.get(), algo, bytes);
  }
  // first: x, second: dy -> dw
  static cudnnStatus_t Run(cudnnHandle_t h, const ConvDescs& c, const void* alpha,
                           const void* first, const void* second,
                           cudnnConvolutionBwdFilterAlgo_t algo, void* ws, size_t bytes,
                           const void* beta, void* out) {
    return cudnnConvolutionBackwardFilter(h, alpha, c.x.get(), first, c.y.get(), second,
                                          c.conv.get(), algo, ws, bytes, beta, c.w.get(), out);
  }
};

// The algorithm of one direction and the workspace it needs.
template <typename Direction>
struct AlgoChoice {
  decltype(Direction::Perf::algo) algo;
  size_t workspace;
};

// float64 has no tensor-core math; float32 keeps to FMA kernels (see ConvolutionOf).
bool FmaOnly(cudnnMathType_t math) { return math == CUDNN_FMA_MATH || math == CUDNN_DEFAULT_MATH; }

// cuDNN's heuristic ranking, best first: the first algorithm that supports the call.
template <typename Direction>
AlgoChoice<Direction> QueryAlgo(cudnnHandle_t h, const ConvDescs& c, DType dtype) {
  int max_count = 0;
  WEFT_CUDNN_CHECK(Direction::MaxCount(h, &max_count));
  std::vector<typename Direction::Perf> perf(max_count);
  int got = 0;
  WEFT_CUDNN_CHECK(Direction::Query(h, c, max_count, &got, perf.data()));
  for (int i = 0; i < got; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS &&
        (dtype == DType::kFloat64 || FmaOnly(perf[i].mathType))) {
      AlgoChoice<Direction> choice{perf[i].algo, 0};
      WEFT_CUDNN_CHECK(Direction::WorkspaceSize(h, c, choice.algo, &choice.workspace));
      return choice;
    }
  }
  WEFT_THROW("Convolution on the GPU: cuDNN has no "
             << Direction::kName << " algorithm for this call (" << dtype << ")");
}

// Everything an algorithm choice depends on.
using AlgoKey = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int64_t, int64_t, int64_t>;

AlgoKey KeyOf(int device, DType dtype, const Window2d& win, const ConvDims& d) {
  return {
      device,    static_cast<int>(dtype), d.g.n,         d.g.c,         d.g.h,         d.g.w,
      d.f,       win.kernel[0],           win.kernel[1], win.stride[0], win.stride[1], win.pad[0],
      win.pad[1]};
}

// QueryAlgo once per key, for the process.
template <typename Direction>
AlgoChoice<Direction> CachedAlgo(const GpuCall& call, const ConvDescs& c, DType dtype,
                                 const AlgoKey& key) {
  static Mutex mu;                                                      // guards cache
  static NoDestructor<std::map<AlgoKey, AlgoChoice<Direction>>> cache;  // like the handles
  {
    MutexLock lock(&mu);
    const auto it = cache->find(key);
    if (it != cache->end()) return it->second;
  }
  const AlgoChoice<Direction> choice =
      call.Cudnn([&](cudnnHandle_t h) { return QueryAlgo<Direction>(h, c, dtype); });
  MutexLock lock(&mu);
  return cache->emplace(key, choice).first->second;
}

// One call: its dtype, descriptors and cache key.
struct ConvCall {
  DType dtype;
  ConvDescs descs;
  AlgoKey key;
};

ConvCall ConvCallOf(const GpuCall& call, const char* op, const ConvParam& p,
                    const TensorView& data) {
  const DType dtype = data.dtype();
  CheckDType(op, dtype, kConvTypes);
  const ConvDims d{Geometry2dOf(op, p.window, data.shape()), p.num_filter};
  return {dtype, DescsOf(dtype, p.window, d), KeyOf(call.device(), dtype, p.window, d)};
}

// One direction's convolution: out = conv(first, second) + beta * out, beta from the request.
template <typename Direction>
void RunConv(const GpuCall& call, const ConvCall& c, const void* first, const void* second,
             OpReq req, void* out) {
  const AlgoChoice<Direction> algo = CachedAlgo<Direction>(call, c.descs, c.dtype, c.key);
  void* workspace = call.Workspace({algo.workspace})[0];
  WEFT_CUDNN_CHECK(call.Cudnn([&](cudnnHandle_t h) {
    return Direction::Run(h, c.descs, One(c.dtype).get(), first, second, algo.algo, workspace,
                          algo.workspace, BetaFor(req, c.dtype).get(), out);
  }));
}

// in: (data, weight[, bias]); out: (output).
void ConvForwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out) {
  const ConvParam& p = a.Get<ConvParam>();
  if (req[0] == OpReq::kNull) return;
  const GpuCall call(ctx);
  const ConvCall c = ConvCallOf(call, "Convolution", p, in[0]);
  RunConv<Forward>(call, c, in[0].raw(), in[1].raw(), req[0], out[0].raw());
  if (p.no_bias) return;
  const TensorDesc bias = ChannelDesc("Convolution", c.dtype, p.num_filter);
  WEFT_CUDNN_CHECK(call.Cudnn([&](cudnnHandle_t h) {
    return cudnnAddTensor(h, One(c.dtype).get(), bias.get(), in[2].raw(), One(c.dtype).get(),
                          c.descs.y.get(), out[0].raw());
  }));
}

// in: (out_grad, data, weight); out: (d_data, d_weight[, d_bias]), each skipped when its request
// is kNull. The steps share the stream, so each may reuse the workspace of the one before.
void ConvBackwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                     std::span<const OpReq> req, std::span<const TensorView> out) {
  const ConvParam& p = a.Get<ConvParam>();
  const GpuCall call(ctx);
  const ConvCall c = ConvCallOf(call, "_backward_Convolution", p, in[1]);
  const void *dy = in[0].raw(), *x = in[1].raw(), *w = in[2].raw();
  if (req[0] != OpReq::kNull) RunConv<BackwardData>(call, c, w, dy, req[0], out[0].raw());
  if (req[1] != OpReq::kNull) RunConv<BackwardFilter>(call, c, x, dy, req[1], out[1].raw());
  if (p.no_bias || req[2] == OpReq::kNull) return;
  const TensorDesc bias = ChannelDesc("_backward_Convolution", c.dtype, p.num_filter);
  WEFT_CUDNN_CHECK(call.Cudnn([&](cudnnHandle_t h) {
    return cudnnConvolutionBackwardBias(h, One(c.dtype).get(), c.descs.y.get(), in[0].raw(),
                                        BetaFor(req[2], c.dtype).get(), bias.get(), out[2].raw());
  }));
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {
                               {"Convolution", {.compute = ConvForwardGpu}},
                               {"_backward_Convolution", {.compute = ConvBackwardGpu}},
                           });

}  // namespace
}  // namespace weft::gpu
