// RNN and _backward_RNN on the GPU, through cuDNN 9's v8 RNN API (cudnnRNNForward,
// cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8); ops/nn/rnn_params.h says what they compute.
// float32 (FMA math only, no TF32, so it matches the CPU's float32, unless WEFT_GPU_TF32=1: see
// internal/cudnn_desc.h), float64, and bfloat16 (float32 math on tensor cores).
//
// The algorithm and, per call shape, the descriptors, sizes and weight-space layout come from a
// plan built once (internal/rnn_plan.h). When the plan's copy runs are one copy of the whole
// vector, the flat vector is the weight space (zero copy); otherwise it is copied into the call's
// workspace on the op's stream.
//
// The reserve output is cuDNN's reserve space; its size is the largest of cuDNN's for the dtypes
// (GpuReserveShape). Workspace: the worker's (GpuCall::Workspace), one request per call.
// Dropout between layers: cuDNN's, from one random state per stream, created on the stream's
// first call and seeded from that call's RandomKey seed (internal/rnn_plan.h); so its draws are
// not the Dropout op's (the CPU's are). Calls on one stream run in order, so no two calls use a
// state at once; the backward reads its forward's mask from the reserve.
//
// Lengths: cuDNN needs them on the host (the data descriptors) and on the device
// (devSeqLengths). The sequence_length input is a host input (Op::host_inputs: a CPU array, its
// writers done when the op runs), read here on the host and copied to the device through the GPU
// pool's pinned staging (Storage::Copy): no synchronization. A captured step runs the RNN with
// lengths on its own, outside any CUDA graph (Op::kReadsHostInputs). Without lengths, devSeqLengths
// (all T) is written on the stream by a fill kernel, so the call records into a graph.
//
// The join (engine/gpu/stream_join.h): cuDNN's RNN queues its kernels on streams of its own, and
// MXNet found its backward data not ordering the last of them before the handle's stream (PR
// #16391: non-persistent bidirectional backward data; a gradient summation launched right after it
// on the worker's stream read d_data before it was written, with the parameters' request null so
// that no backward weights ran in between). What cuDNN 9.19 does on the H200
// (tests/gpu_cudnn_streams_test.cc, 2026-12-02): forward, backward data and backward weights, of
// the standard and the persistent algorithm, one direction and two, run nearly all their kernels
// on four to six streams cuDNN creates, every one of them non-blocking (cudaStreamNonBlocking), and
// one kernel on the handle's stream; it forks to them and joins them back with events (a capture of
// each call ends without cudaErrorStreamCaptureUnjoined). A join through an event on the legacy
// stream (what this op did before) therefore waited for none of those kernels, and waited for all
// the other blocking streams' work: `gpu_bundle/bin/gpu_bench --mlp=0 --tiny=0 --relu=0 --peer=0
// --fusion=0` prints what the step waits for beside a 30 ms kernel on another stream
// (bench/README.md has the figures).
// So each of the three cuDNN calls runs through JoinedLibraryWork: captured into a CUDA graph and
// launched on the op's stream, which orders everything cuDNN queued before the op's later work,
// and nothing else; a fork cuDNN ever left unjoined would fail the capture and take the warned,
// synchronizing fallback instead of a race. Backward data's joins are counted (internal/rnn_gpu.h).
#include <algorithm>
#include <atomic>
#include <initializer_list>
#include <span>
#include <vector>

#include "engine/gpu/stream_join.h"
#include "ops/gpu/internal/cudnn_desc.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"
#include "ops/gpu/internal/rnn_gpu.h"
#include "ops/gpu/internal/rnn_plan.h"
#include "ops/gpu/library_handles.h"
#include "ops/nn/rnn_params.h"
#include "ops/op.h"
#include "storage/storage.h"

namespace weft::gpu {
namespace {

std::atomic<int64_t> backward_joins{0};
std::atomic<int64_t> backward_calls{0};
std::atomic<int64_t> persistent_forwards{0};

// The reserve's size on a GPU (shapes are inferred without dtypes): the largest of cuDNN's sizes
// for the dtypes computed here, each with its own algorithm (a persistent one may need more for
// float32 than the standard one for float64).
void GpuReserveShape(const Attrs& a, const std::vector<Shape>& in, std::vector<Shape>& out) {
  const RnnParam& p = a.Get<RnnParam>();
  const RnnDims d = RnnDimsOf(p, in[RnnSlots::kData]);
  const cudnnHandle_t h = QueryHandle();
  size_t bytes = 0;
  for (DType dtype : kRnnTypes)
    bytes = std::max(bytes, PlanOf(h, p, d, dtype, StatelessDropout(h, p.p)).reserve_bytes);
  out[RnnSlotsOf(p).reserve] = Shape{static_cast<int64_t>(bytes)};
}

// Each length of the sequence_length input (a CPU array, in its dtype), checked as the CPU checks
// it.
std::vector<int32_t> HostLengths(const TensorView& l, const RnnDims& d) {
  std::vector<int32_t> lengths(d.n);
  WEFT_DTYPE_SWITCH(l.dtype(), L, "RNN sequence_length", {
    for (int64_t n = 0; n < d.n; ++n) {
      const double v = static_cast<double>(static_cast<const L*>(l.raw())[n]);
      if (!(v >= 1 && v < static_cast<double>(d.t) + 1)) {
        WEFT_THROW("RNN: sequence_length[" << n << "] is " << v << ", expected a length in [1, "
                                           << d.t << "] (data's T)");
      }
      lengths[n] = static_cast<int32_t>(v);
    }
  });
  return lengths;
}

// One call's data descriptors and lengths (host and device): the plan's, or built for the lengths.
struct CallData {
  DataDesc own_x, own_y;
  cudnnRNNDataDescriptor_t x = nullptr, y = nullptr;
  std::vector<int32_t> lengths;  // from the sequence_length input; empty without one
};

void SetCallData(CallData& c, const RnnPlan& plan, const RnnDims& d, DType dtype,
                 const TensorView* lengths) {
  if (lengths == nullptr) {
    c.x = plan.x.get(), c.y = plan.y.get();
    return;
  }
  c.lengths = HostLengths(*lengths, d);
  SetData(c.own_x.get(), dtype, d, d.i, c.lengths);
  SetData(c.own_y.get(), dtype, d, d.dirs * d.h, c.lengths);
  c.x = c.own_x.get(), c.y = c.own_y.get();
}

// devSeqLengths. Given lengths are staged through pinned memory by the device's pool (the host
// vector has been read when Copy returns, and the CPU does not wait for the device); such a call is
// a capture barrier. Without them every entry is T, written by a fill kernel on the stream, which a
// CUDA graph records (staging would leave the graph reading a freed host buffer).
void CopyLengths(const GpuCall& call, const CallData& c, const RnnDims& d, void* device) {
  if (c.lengths.empty()) {
    FillGpu(call.ctx(), static_cast<double>(d.t), OpReq::kWrite,
            TensorView(device, Shape{d.n}, DType::kInt32, Device::Gpu(call.device())));
    return;
  }
  Storage::Get(Device::Gpu(call.device()))
      ->Copy(device, c.lengths.data(), c.lengths.size() * sizeof(int32_t), &call.stream());
}

// Copies each run between the flat vector and the weight space, in the direction asked.
void CopyRuns(const GpuCall& call, const RnnPlan& plan, size_t elem, char* flat, char* space,
              bool to_space) {
  for (const CopyRun& r : plan.runs) {
    char* f = flat + r.flat * elem;
    char* s = space + r.space * elem;
    call.stream().Copy(to_space ? s : f, to_space ? f : s, r.count * elem,
                       cudaMemcpyDeviceToDevice);
  }
}

// dst += src over n elements of dtype, on the call's stream (weft's own add kernel: every dtype).
void AddInto(const GpuCall& call, DType dtype, int64_t n, const void* src, void* dst) {
  const Device device = Device::Gpu(call.device());
  CopyGpu(call.ctx(), TensorView(const_cast<void*>(src), Shape{n}, dtype, device), OpReq::kAddTo,
          TensorView(dst, Shape{n}, dtype, device));
}

// Where cuDNN writes an output of this request: the output itself for a write, scratch for an add
// (then AddInto) or, where cuDNN must write it anyway, a null request; nullptr when it may skip it.
void* TargetOf(OpReq req, const TensorView* out, void* scratch, bool required) {
  if (out != nullptr && Writes(req)) return out->raw();
  if (out != nullptr && req == OpReq::kAddTo) return scratch;
  return required ? scratch : nullptr;
}

size_t ScratchBytes(OpReq req, const TensorView* out, bool required) {
  if (out == nullptr) return 0;
  if (req == OpReq::kAddTo || (req == OpReq::kNull && required)) return out->bytes();
  return 0;
}

void FinishOutput(const GpuCall& call, OpReq req, const TensorView* out, const void* scratch) {
  if (out != nullptr && req == OpReq::kAddTo)
    AddInto(call, out->dtype(), out->size(), scratch, out->raw());
}

// One call's common parts: attributes, extents, slots, dtype and plan.
struct GpuRnnCall {
  const RnnParam& p;
  RnnDims d;
  RnnSlots s;
  DType dtype;
  const RnnPlan* plan;
};

GpuRnnCall CallOf(const GpuCall& call, const Attrs& a, std::span<const TensorView> fwd_in,
                  uint64_t seed, const char* op) {
  const RnnParam& p = a.Get<RnnParam>();
  const DType dtype = fwd_in[RnnSlots::kData].dtype();
  CheckDType(op, dtype, {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16});
  const RnnDims d = RnnDimsOf(p, fwd_in[RnnSlots::kData].shape());
  const RnnPlan& plan = call.Cudnn([&](cudnnHandle_t h) -> const RnnPlan& {
    return PlanOf(h, p, d, dtype, StreamDropout(h, call.stream().handle(), p.p, seed));
  });
  return {p, d, RnnSlotsOf(p), dtype, &plan};
}

// The weight space: the flat vector itself (zero copy) or `space`, filled from it.
void* WeightSpace(const GpuCall& call, const GpuRnnCall& c, const TensorView& flat, void* space) {
  if (c.plan->zero_copy) return flat.raw();
  call.stream().Memset(space, 0, c.plan->weight_bytes);
  CopyRuns(call, *c.plan, DTypeSize(c.dtype), static_cast<char*>(flat.raw()),
           static_cast<char*>(space), true);
  return space;
}

const TensorView* Optional(std::span<const TensorView> views, int slot) {
  return slot < 0 ? nullptr : &views[slot];
}

// The parts of a forward's workspace (GpuCall::Workspace): the weight space (unless zero copy),
// cuDNN's workspace, the device lengths, then TargetOf's scratch of out, state_out and
// state_cell_out.
struct ForwardWorkspace {
  void *weight_space, *work, *lengths, *y, *hy, *cy;
};

// The parts of a backward's workspace: as the forward's, then d_parameters' weight space and its
// flat scratch (for an add), then TargetOf's scratch of d_data, d_state and d_state_cell.
struct BackwardWorkspace {
  void *weight_space, *work, *lengths, *dw_space, *dw_flat, *dx, *dhx, *dcx;
};

// A cuDNN call's path (JoinedLibraryWork::Run): one bit per optional argument given.
uint32_t PathOf(std::initializer_list<bool> given) {
  uint32_t path = 0, bit = 1;
  for (bool g : given) path |= g ? bit : 0, bit <<= 1;
  return path;
}

// in: (data, parameters, state[, state_cell][, sequence_length]); out: the visible outputs, then
// the reserve.
void RnnForwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                   std::span<const OpReq> req, std::span<const TensorView> out) {
  const GpuCall call(ctx);
  const GpuRnnCall c = CallOf(call, a, in, ctx.random.seed, "RNN");
  const RnnPlan& plan = *c.plan;
  CallData data;
  SetCallData(data, plan, c.d, c.dtype, Optional(in, c.s.lengths));
  const bool train = ctx.is_train && req[c.s.reserve] != OpReq::kNull;
  if (plan.algo != CUDNN_RNN_ALGO_STANDARD)
    persistent_forwards.fetch_add(1, std::memory_order_relaxed);
  if (train) {
    WEFT_CHECK(out[c.s.reserve].bytes() >= plan.reserve_bytes)
        << "RNN: the reserve holds " << out[c.s.reserve].bytes() << " bytes, expected at least "
        << plan.reserve_bytes << " (were its shapes inferred without the device?)";
  }
  const TensorView* hy = Optional(out, c.s.state_out);
  const TensorView* cy = Optional(out, c.s.state_cell_out);
  const OpReq hy_req = hy ? req[c.s.state_out] : OpReq::kNull,
              cy_req = cy ? req[c.s.state_cell_out] : OpReq::kNull;
  const std::vector<void*> parts =
      call.Workspace({plan.zero_copy ? 0 : plan.weight_bytes, plan.work_bytes,
                      c.d.n * sizeof(int32_t), ScratchBytes(req[0], &out[0], true),
                      ScratchBytes(hy_req, hy, false), ScratchBytes(cy_req, cy, false)});
  const ForwardWorkspace ws{parts[0], parts[1], parts[2], parts[3], parts[4], parts[5]};
  void* weights = WeightSpace(call, c, in[RnnSlots::kParams], ws.weight_space);
  CopyLengths(call, data, c.d, ws.lengths);
  void* y = TargetOf(req[0], &out[0], ws.y, true);
  void* hy_ptr = TargetOf(hy_req, hy, ws.hy, false);
  void* cy_ptr = TargetOf(cy_req, cy, ws.cy, false);
  const void* cx = c.s.state_cell < 0 ? nullptr : in[c.s.state_cell].raw();
  const uint32_t path = PathOf({train, hy_ptr != nullptr, cx != nullptr, cy_ptr != nullptr});
  plan.forward.Run(call.stream(), path, [&](engine::GpuStream& s) {
    WEFT_CUDNN_CHECK(WithCudnn(s, [&](cudnnHandle_t h) {
      return cudnnRNNForward(
          h, plan.rnn.get(), train ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
          static_cast<const int32_t*>(ws.lengths), data.x, in[RnnSlots::kData].raw(), data.y, y,
          plan.h.get(), in[RnnSlots::kState].raw(), hy_ptr, plan.h.get(), cx, cy_ptr,
          plan.weight_bytes, weights, plan.work_bytes, ws.work, train ? plan.reserve_bytes : 0,
          train ? out[c.s.reserve].raw() : nullptr);
    }));
  });
  FinishOutput(call, req[0], &out[0], ws.y);
  FinishOutput(call, hy_req, hy, ws.hy);
  FinishOutput(call, cy_req, cy, ws.cy);
}

// The weights' gradient, after backward data: cuDNN accumulates into a weight space (its only
// mode), which is the gradient itself when the layouts agree, or scratch copied back to weft's
// layout (through more scratch for an add).
void BackwardWeights(const GpuCall& call, const GpuRnnCall& c, const CallData& data,
                     std::span<const TensorView> in, OpReq req, const TensorView& dw,
                     const BackwardWorkspace& ws) {
  const RnnPlan& plan = *c.plan;
  const RnnSlots& s = c.s;
  void* space = plan.zero_copy ? dw.raw() : ws.dw_space;
  if (!plan.zero_copy || req != OpReq::kAddTo) call.stream().Memset(space, 0, plan.weight_bytes);
  const TensorView& reserve = in[RnnSlots::kBackwardReserve];
  plan.backward_weights.Run(call.stream(), 0, [&](engine::GpuStream& st) {
    WEFT_CUDNN_CHECK(WithCudnn(st, [&](cudnnHandle_t h) {
      return cudnnRNNBackwardWeights_v8(
          h, plan.rnn.get(), CUDNN_WGRAD_MODE_ADD, static_cast<const int32_t*>(ws.lengths), data.x,
          in[s.BackwardInput(RnnSlots::kData)].raw(), plan.h.get(),
          in[s.BackwardInput(RnnSlots::kState)].raw(), data.y, in[RnnSlots::kBackwardOut].raw(),
          plan.weight_bytes, space, plan.work_bytes, ws.work, plan.reserve_bytes, reserve.raw());
    }));
  });
  if (plan.zero_copy) return;
  const bool add = req == OpReq::kAddTo;
  char* flat = static_cast<char*>(add ? ws.dw_flat : dw.raw());
  CopyRuns(call, plan, DTypeSize(c.dtype), flat, static_cast<char*>(space), false);
  if (add) AddInto(call, c.dtype, dw.size(), flat, dw.raw());
}

// Backward data, joined (the file comment says why) on every path, and counted for tests.
void BackwardData(const GpuCall& call, const GpuRnnCall& c, const CallData& data,
                  std::span<const TensorView> in, std::span<const OpReq> req,
                  std::span<const TensorView> out, const BackwardWorkspace& ws,
                  const void* weights) {
  const RnnSlots& s = c.s;
  const TensorView* dhx = &out[RnnSlots::kState];
  const TensorView* dcx = Optional(out, s.state_cell);
  const void* dhy = s.state_out < 0 ? nullptr : in[s.BackwardOutGrad(s.state_out)].raw();
  const void* dcy = s.state_cell_out < 0 ? nullptr : in[s.BackwardOutGrad(s.state_cell_out)].raw();
  const void* cx = s.state_cell < 0 ? nullptr : in[s.BackwardInput(s.state_cell)].raw();
  void* dx = TargetOf(req[0], &out[0], ws.dx, true);
  void* dhx_ptr = TargetOf(req[RnnSlots::kState], dhx, ws.dhx, false);
  void* dcx_ptr = dcx ? TargetOf(req[s.state_cell], dcx, ws.dcx, false) : nullptr;
  const TensorView& reserve = in[RnnSlots::kBackwardReserve];
  const RnnPlan& plan = *c.plan;
  const uint32_t path = PathOf(
      {dhy != nullptr, dhx_ptr != nullptr, cx != nullptr, dcy != nullptr, dcx_ptr != nullptr});
  plan.backward_data.Run(call.stream(), path, [&](engine::GpuStream& st) {
    WEFT_CUDNN_CHECK(WithCudnn(st, [&](cudnnHandle_t h) {
      return cudnnRNNBackwardData_v8(
          h, plan.rnn.get(), static_cast<const int32_t*>(ws.lengths), data.y,
          in[RnnSlots::kBackwardOut].raw(), in[s.BackwardOutGrad(RnnSlots::kOut)].raw(), data.x, dx,
          plan.h.get(), in[s.BackwardInput(RnnSlots::kState)].raw(), dhy, dhx_ptr, plan.h.get(), cx,
          dcy, dcx_ptr, plan.weight_bytes, weights, plan.work_bytes, ws.work, plan.reserve_bytes,
          reserve.raw());
    }));
  });
  backward_joins.fetch_add(1, std::memory_order_relaxed);
  FinishOutput(call, req[0], &out[0], ws.dx);
  FinishOutput(call, req[RnnSlots::kState], dhx, ws.dhx);
  if (dcx) FinishOutput(call, req[s.state_cell], dcx, ws.dcx);
}

// in: _backward_RNN's inputs (rnn_params.h); out: the gradients of data, parameters, the states.
void RnnBackwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out) {
  backward_calls.fetch_add(1, std::memory_order_relaxed);
  const GpuCall call(ctx);
  const RnnSlots slots = RnnSlotsOf(a.Get<RnnParam>());
  const std::span<const TensorView> fwd = in.subspan(slots.BackwardInput(0), slots.num_inputs);
  const GpuRnnCall c = CallOf(call, a, fwd, ctx.random.seed, "_backward_RNN");
  const RnnPlan& plan = *c.plan;
  const TensorView& reserve = in[RnnSlots::kBackwardReserve];
  WEFT_CHECK(reserve.bytes() >= plan.reserve_bytes)
      << "_backward_RNN: the reserve holds " << reserve.bytes() << " bytes, expected at least "
      << plan.reserve_bytes << " (were its shapes inferred without the device?)";
  CallData data;
  SetCallData(data, plan, c.d, c.dtype, Optional(fwd, c.s.lengths));
  const OpReq dw_req = req[RnnSlots::kParams];
  const TensorView* dcx = Optional(out, c.s.state_cell);
  const bool dw_space = dw_req != OpReq::kNull && !plan.zero_copy;
  const std::vector<void*> parts = call.Workspace(
      {plan.zero_copy ? 0 : plan.weight_bytes, plan.work_bytes, c.d.n * sizeof(int32_t),
       dw_space ? plan.weight_bytes : 0, dw_space && dw_req == OpReq::kAddTo ? out[1].bytes() : 0,
       ScratchBytes(req[0], &out[0], true),
       ScratchBytes(req[RnnSlots::kState], &out[RnnSlots::kState], false),
       dcx ? ScratchBytes(req[c.s.state_cell], dcx, false) : 0});
  const BackwardWorkspace ws{parts[0], parts[1], parts[2], parts[3],
                             parts[4], parts[5], parts[6], parts[7]};
  const void* weights = WeightSpace(call, c, fwd[RnnSlots::kParams], ws.weight_space);
  CopyLengths(call, data, c.d, ws.lengths);
  BackwardData(call, c, data, in, req, out, ws, weights);
  if (dw_req != OpReq::kNull)
    BackwardWeights(call, c, data, in, dw_req, out[RnnSlots::kParams], ws);
}

// No capture barrier: a recorded backward is checked by the capture (JoinBackwardData). With
// sequence lengths (a host input) a captured step runs the op on its own (Op::CaptureBarrier).
WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {
                               {"RNN",
                                {.compute = RnnForwardGpu, .output_shapes = GpuReserveShape}},
                               {"_backward_RNN", {.compute = RnnBackwardGpu}},
                           });

}  // namespace

int64_t RnnBackwardJoins() { return backward_joins.load(std::memory_order_relaxed); }
int64_t RnnBackwardCalls() { return backward_calls.load(std::memory_order_relaxed); }
int64_t RnnPersistentForwards() { return persistent_forwards.load(std::memory_order_relaxed); }
// RnnDropoutState: internal/rnn_plan.cc, beside the states.

}  // namespace weft::gpu
