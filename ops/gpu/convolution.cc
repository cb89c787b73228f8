// Convolution and _backward_Convolution on the GPU, through cuDNN's convolution API
// (ops/nn/convolution.cc says what they compute), grouped (cudnnSetConvolutionGroupCount) and
// dilated. float32 and float64, and bfloat16 tensors computing in float on tensor cores; float32
// runs FMA kernels only (no TF32), so it matches the CPU's float32.
//
// Layout NCHW or NHWC (ops/nn/window2d.h). Channels last, cuDNN's tensor-core kernels read and
// write the images as they lie (NCHW bfloat16 is transposed inside cuDNN around them) and read
// the filter as KRSC: where weft's (F, C / G, kh, kw) weight is not that already (a window of
// more than one tap over more than one channel a group), the forward and backward-data calls
// transpose it into workspace, and backward-filter writes KRSC into workspace and transposes it
// back (internal/move.h's TransposeGpu).
//
// Algorithms: cudnnGet*Algorithm_v7 ranks them by cuDNN's heuristics without running anything (the
// Find* calls would time them, which synchronizes and allocates outside weft's pools); the first
// one that supports the call and keeps to FMA math is taken, once per (direction, shape, window,
// dtype, device), and remembered for the process. Its workspace comes from ctx.Workspace.
// Bias, in kernels/convolution.cuh for every dtype: the forward writes the bias into the output and
// the convolution adds to it (beta 1), so a bf16 output is rounded once; the backward sums out_grad
// per channel. An activation epilogue (act_type) runs Activation's kernel over the output after.
#include <array>
#include <map>
#include <mutex>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/mutex.h"
#include "core/no_destructor.h"
#include "ops/gpu/internal/activation.h"
#include "ops/gpu/internal/cudnn_desc.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"
#include "ops/gpu/internal/move.h"
#include "ops/gpu/internal/reduce.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

constexpr std::initializer_list<DType> kConvTypes = {DType::kFloat32, DType::kFloat64,
                                                     DType::kBFloat16, DType::kFloat16};

// The descriptors of one call: data x (N, C, H, W), weight w (F, C / G, kh, kw), output y
// (N, F, OH, OW), and the convolution.
struct ConvDescs {
  TensorDesc x, y;
  FilterDesc w;
  ConvolutionDesc conv;
};

ConvDescs DescsOf(DType dtype, const Window2d& win, const ConvDims& d) {
  const char* op = "Convolution";
  const Geometry2d& g = d.g;
  const bool last = win.channels_last;
  return {ImageDesc(op, dtype, Shape{g.n, g.c, g.h, g.w}, last),
          ImageDesc(op, dtype, Shape{g.n, d.f, g.oh, g.ow}, last),
          FilterOf(op, dtype, d.Weight(win), last), ConvolutionOf(dtype, win, d.groups)};
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

// float32 keeps to FMA kernels (see ConvolutionOf); float64 has no tensor-core math, and
// bfloat16 takes any.
bool MathAllowed(DType dtype, cudnnMathType_t math) {
  return dtype != DType::kFloat32 || math == CUDNN_FMA_MATH || math == CUDNN_DEFAULT_MATH;
}

// cuDNN's heuristic ranking, best first: the first algorithm that supports the call.
template <typename Direction>
AlgoChoice<Direction> QueryAlgo(cudnnHandle_t h, const ConvDescs& c, DType dtype) {
  int max_count = 0;
  WEFT_CUDNN_CHECK(Direction::MaxCount(h, &max_count));
  std::vector<typename Direction::Perf> perf(max_count);
  int got = 0;
  WEFT_CUDNN_CHECK(Direction::Query(h, c, max_count, &got, perf.data()));
  for (int i = 0; i < got; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS && MathAllowed(dtype, perf[i].mathType)) {
      AlgoChoice<Direction> choice{perf[i].algo, 0};
      WEFT_CUDNN_CHECK(Direction::WorkspaceSize(h, c, choice.algo, &choice.workspace));
      return choice;
    }
  }
  WEFT_THROW("Convolution on the GPU: cuDNN has no "
             << Direction::kName << " algorithm for this call (" << dtype << ")");
}

// Everything an algorithm choice depends on.
using AlgoKey = std::array<int64_t, 17>;

AlgoKey KeyOf(int device, DType dtype, const Window2d& win, const ConvDims& d) {
  return {device,
          static_cast<int>(dtype),
          win.channels_last,
          d.g.n,
          d.g.c,
          d.g.h,
          d.g.w,
          d.f,
          d.groups,
          win.kernel[0],
          win.kernel[1],
          win.stride[0],
          win.stride[1],
          win.pad[0],
          win.pad[1],
          win.dilate[0],
          win.dilate[1]};
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

// One call: its dtype, window, extents, descriptors and cache key.
struct ConvCall {
  DType dtype;
  Device device;
  Window2d win;
  ConvDims dims;
  ConvDescs descs;
  AlgoKey key;

  // The weight's extents, (F, C / G, kh, kw), and as cuDNN reads it channels last: KRSC.
  Shape Weight() const { return dims.Weight(win); }
  Shape Krsc() const {
    const Shape w = Weight();
    return Shape{w[0], w[2], w[3], w[1]};
  }
  // Whether cuDNN reads the weight in another order than weft keeps it: channels last, with
  // more than one tap a window and more than one channel a group.
  bool TransposesWeight() const {
    const Shape w = Weight();
    return win.channels_last && w[1] > 1 && w[2] * w[3] > 1;
  }
  size_t KrscBytes() const { return TransposesWeight() ? Weight().Size() * DTypeSize(dtype) : 0; }
};

ConvCall ConvCallOf(const GpuCall& call, const char* op, const ConvParam& p,
                    const TensorView& data) {
  const DType dtype = data.dtype();
  CheckDType(op, dtype, kConvTypes);
  CheckNotBlocked(op, p.window.blocked);
  const ConvDims d = ConvDimsOf(op, p, data.shape());
  return {dtype,
          data.device(),
          p.window,
          d,
          DescsOf(dtype, p.window, d),
          KeyOf(call.device(), dtype, p.window, d)};
}

constexpr int64_t kToKrsc[] = {0, 2, 3, 1}, kFromKrsc[] = {0, 3, 1, 2};

// The weight as cuDNN reads it: w itself, or its KRSC transpose written into `krsc`.
const void* WeightAsRead(const OpContext& ctx, const ConvCall& c, const TensorView& w, void* krsc) {
  if (!c.TransposesWeight()) return w.raw();
  TransposeGpu(ctx, w, kToKrsc, OpReq::kWrite, TensorView(krsc, c.Krsc(), c.dtype, c.device));
  return krsc;
}

// One direction's convolution with algorithm `algo` and its workspace: out = conv(first, second)
// + beta * out, beta from the request.
template <typename Direction>
void RunConvWith(const GpuCall& call, const ConvCall& c, const AlgoChoice<Direction>& algo,
                 void* workspace, const void* first, const void* second, OpReq req, void* out) {
  WEFT_CUDNN_CHECK(call.Cudnn([&](cudnnHandle_t h) {
    return Direction::Run(h, c.descs, One(c.dtype).get(), first, second, algo.algo, workspace,
                          algo.workspace, BetaFor(req, c.dtype).get(), out);
  }));
}

// The cached algorithm of a direction and the call's workspace: the algorithm's, the weight in
// KRSC where the call transposes it, and `extra` bytes for the caller.
template <typename Direction>
struct Prepared {
  AlgoChoice<Direction> algo;
  void *workspace, *krsc, *extra;
};

template <typename Direction>
Prepared<Direction> Prepare(const GpuCall& call, const ConvCall& c, size_t extra = 0) {
  const AlgoChoice<Direction> algo = CachedAlgo<Direction>(call, c.descs, c.dtype, c.key);
  const std::vector<void*> ws = call.Workspace({algo.workspace, c.KrscBytes(), extra});
  return {algo, ws[0], ws[1], ws[2]};
}

// out = conv(x, w) + beta * out as req says, into `out`.
void RunForward(const GpuCall& call, const ConvCall& c, const Prepared<Forward>& p, const void* x,
                const TensorView& w, OpReq req, void* out) {
  RunConvWith(call, c, p.algo, p.workspace, x, WeightAsRead(call.ctx(), c, w, p.krsc), req, out);
}

// dx = conv_backward_data(w, dy) as req says.
void RunBackwardData(const GpuCall& call, const ConvCall& c, const TensorView& w, const void* dy,
                     OpReq req, void* dx) {
  const Prepared<BackwardData> p = Prepare<BackwardData>(call, c);
  RunConvWith(call, c, p.algo, p.workspace, WeightAsRead(call.ctx(), c, w, p.krsc), dy, req, dx);
}

// dw = conv_backward_filter(x, dy) as req says: through KRSC workspace where the call transposes
// the weight.
void RunBackwardFilter(const GpuCall& call, const ConvCall& c, const void* x, const void* dy,
                       OpReq req, void* dw) {
  const Prepared<BackwardFilter> p = Prepare<BackwardFilter>(call, c);
  if (!c.TransposesWeight()) return RunConvWith(call, c, p.algo, p.workspace, x, dy, req, dw);
  RunConvWith(call, c, p.algo, p.workspace, x, dy, OpReq::kWrite, p.krsc);
  TransposeGpu(call.ctx(), TensorView(p.krsc, c.Krsc(), c.dtype, c.device), kFromKrsc, req,
               TensorView(dw, c.Weight(), c.dtype, c.device));
}

// db (F,) = dy (N, F, OH, OW) summed over all but the channel axis, as req says: a block per
// channel; channels last, dy's rows (N * OH * OW, F) summed (internal/reduce.h).
void ChannelSumsGpu(const OpContext& ctx, const ConvCall& c, const TensorView& dy, OpReq req,
                    const TensorView& db) {
  int64_t n = c.dims.g.n, channels = c.dims.f, plane = c.dims.g.oh * c.dims.g.ow;
  if (c.win.channels_last) {
    return SumRowsGpu(ctx, TensorView(dy.raw(), Shape{n * plane, channels}, c.dtype, dy.device()),
                      req, db);
  }
  const void* dyp = dy.raw();
  void* dbp = db.raw();
  int code = ReqCode(req);
  void* args[] = {&dyp, &dbp, &n, &channels, &plane, &code};
  LaunchArgs(ctx, "convolution.cuh", Instance("weft::ChannelSums", {TypeName(c.dtype)}), channels,
             /*block_per_item=*/true, args);
}

// The output's elements, and the distance between two of one position in adjacent channels (the
// plane for NCHW, 1 for NHWC): how convolution.cuh's bias kernels find an element's channel.
struct OutputChannels {
  int64_t size, step;
};
OutputChannels OutputChannelsOf(const ConvCall& c) {
  const Geometry2d& g = c.dims.g;
  return {g.n * c.dims.f * g.oh * g.ow, g.OutStrides(c.dims.f).channel};
}

// y = b (as req says, over the channel axis) for the convolution to add to.
void WriteChannelBias(const OpContext& ctx, const ConvCall& c, const void* bias, OpReq req,
                      void* y) {
  const OutputChannels o = OutputChannelsOf(c);
  Launch(ctx, "convolution.cuh", Instance("weft::ChannelBias", {TypeName(c.dtype)}), o.size, bias,
         y, o.size, c.dims.f, o.step, ReqCode(req));
}

// y += act(conv(x, w) + b): the convolution into workspace beside its algorithm's, then the
// activation adds it to y.
void ConvActAddGpu(const OpContext& ctx, const GpuCall& call, const ConvCall& c, const ConvParam& p,
                   std::span<const TensorView> in, const TensorView& y) {
  const Prepared<Forward> prepared = Prepare<Forward>(call, c, y.bytes());
  void* conv = prepared.extra;
  OpReq conv_req = OpReq::kWrite;
  if (!p.no_bias) {
    WriteChannelBias(ctx, c, in[2].raw(), OpReq::kWrite, conv);
    conv_req = OpReq::kAddTo;
  }
  RunForward(call, c, prepared, in[0].raw(), in[1], conv_req, conv);
  LaunchActivation(ctx, *p.act, TensorView(conv, y.shape(), c.dtype, y.device()), OpReq::kAddTo, y);
}

// y = act(conv(x, w) + b) in float32 or float64: the convolution writes y, then one pass adds the
// bias and applies the activation (ChannelBiasAct), where the bias written first, read back by
// the convolution and the activation's own pass would move y's bytes five times, not three.
// (16-bit outputs keep the bias under the convolution: rounded once.)
void ConvBiasActGpu(const OpContext& ctx, const GpuCall& call, const ConvCall& c,
                    const ConvParam& p, std::span<const TensorView> in, const TensorView& y) {
  RunForward(call, c, Prepare<Forward>(call, c), in[0].raw(), in[1], OpReq::kWrite, y.raw());
  const OutputChannels o = OutputChannelsOf(c);
  int v = PackWidth(c.dtype, {y.raw()});
  if (o.step != 1 && o.step % v != 0) v = 1;
  Launch(ctx, "convolution.cuh",
         Instance("weft::ChannelBiasAct",
                  {ActivationFunctor(*p.act), TypeName(c.dtype), std::to_string(v)}),
         Packs(o.size, v), in[2].raw(), y.raw(), o.size, c.dims.f, o.step);
}

// in: (data, weight[, bias]); out: (output). With a bias, y starts from it (as req says) and the
// convolution adds to it; an activation epilogue then runs over y in place (from workspace when
// adding to y). float32 and float64 with both write y first (ConvBiasActGpu).
void ConvForwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out) {
  const ConvParam& p = a.Get<ConvParam>();
  if (p.with_sum) {
    WEFT_THROW(
        "Convolution: with_sum runs on the CPU only (passes/fold_sum.h makes it there); on "
        "the GPU add the sum as its own op");
  }
  if (req[0] == OpReq::kNull) return;
  const GpuCall call(ctx);
  const ConvCall c = ConvCallOf(call, "Convolution", p, in[0]);
  if (p.act && req[0] == OpReq::kAddTo) return ConvActAddGpu(ctx, call, c, p, in, out[0]);
  if (p.act && !p.no_bias && !Is16BitFloat(c.dtype))
    return ConvBiasActGpu(ctx, call, c, p, in, out[0]);
  OpReq conv_req = req[0];
  if (!p.no_bias) {
    WriteChannelBias(ctx, c, in[2].raw(), req[0], out[0].raw());
    conv_req = OpReq::kAddTo;
  }
  RunForward(call, c, Prepare<Forward>(call, c), in[0].raw(), in[1], conv_req, out[0].raw());
  if (p.act) LaunchActivation(ctx, *p.act, out[0], OpReq::kWriteInplace, out[0]);
}

// in: (out_grad, data, weight); out: (d_data, d_weight[, d_bias]), each skipped when its request
// is kNull. The steps share the stream, so each may reuse the workspace of the one before.
void ConvBackwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                     std::span<const OpReq> req, std::span<const TensorView> out) {
  const ConvParam& p = a.Get<ConvParam>();
  const GpuCall call(ctx);
  const ConvCall c = ConvCallOf(call, "_backward_Convolution", p, in[1]);
  const void *dy = in[0].raw(), *x = in[1].raw();
  if (req[0] != OpReq::kNull) RunBackwardData(call, c, in[2], dy, req[0], out[0].raw());
  if (req[1] != OpReq::kNull) RunBackwardFilter(call, c, x, dy, req[1], out[1].raw());
  if (p.no_bias || req[2] == OpReq::kNull) return;
  ChannelSumsGpu(ctx, c, in[0], req[2], out[2]);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {
                               {"Convolution", {.compute = ConvForwardGpu}},
                               {"_backward_Convolution", {.compute = ConvBackwardGpu}},
                           });

}  // namespace
}  // namespace weft::gpu
