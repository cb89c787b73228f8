// What cuDNN's RNN does with streams on this machine, and that weft's join covers all of it
// (ops/gpu/rnn.cc, engine/gpu/stream_join.h). This test watches every stream the process creates
// (CUPTI's callback API: the flags given to cudaStreamCreate*/cuStreamCreate*, and CUPTI's id of
// each stream), runs an LSTM forward and backward under weft's profiler (whose trace puts each
// kernel on its stream's track, names the op that queued it, and marks the kernels of a CUDA
// graph), for the standard and the persistent algorithm, one direction and two, the parameters'
// gradient requested or not, and checks: every kernel of RNN and _backward_RNN ran either on the
// engine's stream or inside a graph (the join's, launched on the op's stream, so done before the
// stream's next work), none on cuDNN's streams outside one; each cuDNN call was captured and
// launched as a graph, and cuDNN joined every fork back (no fallback). It prints what it saw:
// kernels per stream per op, and each stream's flags.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "engine/gpu/stream_join.h"
#include "executor/executor.h"
#include "graph/symbol.h"
#include "ops/gpu/internal/rnn_gpu.h"
#include "ops/nn/rnn_params.h"
#include "ops/op.h"
#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft::gpu {
namespace {

using nlohmann::json;

// Every stream created after Watch(): its creation flags (when made through an API call CUPTI
// reports) and CUPTI's id for it (the id the profiler's trace uses as the stream's track).
class StreamLog {
 public:
  // Subscribes; an empty string, or why CUPTI's callbacks are not available (another tool, such
  // as compute-sanitizer, holds them).
  std::string Watch() {
    CUpti_SubscriberHandle subscriber;
    if (cuptiSubscribe(&subscriber, &StreamLog::Callback, this) != CUPTI_SUCCESS)
      return "cuptiSubscribe failed";
    const std::pair<CUpti_CallbackDomain, CUpti_CallbackId> calls[] = {
        {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamCreate_v3020},
        {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamCreateWithFlags_v5000},
        {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamCreateWithPriority_v5050},
        {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamCreate},
        {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamCreateWithPriority},
        {CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_STREAM_CREATED}};
    for (const auto& [domain, id] : calls)
      if (cuptiEnableCallback(1, subscriber, domain, id) != CUPTI_SUCCESS)
        return "cuptiEnableCallback failed";
    return "";
  }

  // Every stream seen created, as "id (blocking|non-blocking)", in CUPTI's id order.
  std::string Summary() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<uint32_t, unsigned> by_id;
    for (const auto& [stream, id] : ids_)
      if (flags_.count(stream)) by_id[id] = flags_.at(stream);
    std::string out;
    for (const auto& [id, flags] : by_id)
      out += " " + std::to_string(id) +
             (flags & cudaStreamNonBlocking ? " (non-blocking)" : " (blocking)");
    return out;
  }

  // A stream's creation flags by CUPTI's id; -1 when it was not seen created.
  int FlagsOf(uint32_t cupti_id) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [stream, id] : ids_) {
      if (id != cupti_id) continue;
      auto it = flags_.find(stream);
      return it == flags_.end() ? -1 : static_cast<int>(it->second);
    }
    return -1;
  }

 private:
  static void CUPTIAPI Callback(void* self, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                                const void* data) {
    static_cast<StreamLog*>(self)->Record(domain, id, data);
  }

  void Record(CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
    std::lock_guard<std::mutex> lock(mu_);
    if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
      const auto* r = static_cast<const CUpti_ResourceData*>(data);
      uint32_t cupti_id = 0;
      if (cuptiGetStreamIdEx(r->context, r->resourceHandle.stream, 0, &cupti_id) == CUPTI_SUCCESS)
        ids_[r->resourceHandle.stream] = cupti_id;
      return;
    }
    const auto* call = static_cast<const CUpti_CallbackData*>(data);
    if (call->callbackSite != CUPTI_API_EXIT) return;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) RuntimeCreated(id, call->functionParams);
    if (domain == CUPTI_CB_DOMAIN_DRIVER_API) DriverCreated(id, call->functionParams);
  }
  void RuntimeCreated(CUpti_CallbackId id, const void* p) {  // under mu_
    if (id == CUPTI_RUNTIME_TRACE_CBID_cudaStreamCreate_v3020)
      flags_[*static_cast<const cudaStreamCreate_v3020_params*>(p)->pStream] = 0;
    if (id == CUPTI_RUNTIME_TRACE_CBID_cudaStreamCreateWithFlags_v5000) {
      const auto* a = static_cast<const cudaStreamCreateWithFlags_v5000_params*>(p);
      flags_[*a->pStream] = a->flags;
    }
    if (id == CUPTI_RUNTIME_TRACE_CBID_cudaStreamCreateWithPriority_v5050) {
      const auto* a = static_cast<const cudaStreamCreateWithPriority_v5050_params*>(p);
      flags_[*a->pStream] = a->flags;
    }
  }
  void DriverCreated(CUpti_CallbackId id, const void* p) {  // under mu_
    if (id == CUPTI_DRIVER_TRACE_CBID_cuStreamCreate) {
      const auto* a = static_cast<const cuStreamCreate_params*>(p);
      flags_[*a->phStream] = a->Flags;
    }
    if (id == CUPTI_DRIVER_TRACE_CBID_cuStreamCreateWithPriority) {
      const auto* a = static_cast<const cuStreamCreateWithPriority_params*>(p);
      flags_[*a->phStream] = a->flags;
    }
  }

  mutable std::mutex mu_;
  std::map<void*, unsigned> flags_;  // by handle (a runtime and a driver handle are the same)
  std::map<void*, uint32_t> ids_;    // by handle: CUPTI's id
};

StreamLog& Log() {
  static StreamLog log;
  return log;
}

// Subscribed before any test, so before the engine creates its streams and cuDNN its own.
std::string g_watch_error;
class WatchStreams : public ::testing::Environment {
 public:
  void SetUp() override { g_watch_error = Log().Watch(); }
};
const ::testing::Environment* const kWatch = ::testing::AddGlobalTestEnvironment(new WatchStreams);

struct Case {
  DType
      dtype;  // bfloat16: cuDNN's persistent algorithm at H 64 (AlgoFor); float32: the standard one
  bool bidirectional;
  GradReq params;
  std::string Name() const {
    return std::string(DTypeName(dtype)) + (bidirectional ? " bi" : " uni") +
           (params == GradReq::kNull ? ", parameters' gradient null"
                                     : ", parameters' gradient written");
  }
};

AttrMap AttrsOf(const Case& c) {
  return {{"mode", "lstm"},
          {"state_size", "64"},
          {"num_layers", "2"},
          {"bidirectional", c.bidirectional ? "true" : "false"},
          {"state_outputs", "false"}};
}

// One forward and backward of a 2-layer LSTM (T16 N32 I64 H64) bound on gpu:0.
void RunLstm(const Case& c) {
  const Device gpu = Device::Gpu(0);
  const int64_t dirs = c.bidirectional ? 2 : 1;
  const int64_t params =
      RnnParamLayout(ParseAttrs(GetOp("RNN"), AttrsOf(c)).Get<RnnParam>(), 64).size();
  const std::map<std::string, Shape> shapes = {{"data", Shape{16, 32, 64}},
                                               {"parameters", Shape{params}},
                                               {"state", Shape{2 * dirs, 32, 64}},
                                               {"state_cell", Shape{2 * dirs, 32, 64}}};
  Executor::ArrayMap args, grads;
  std::map<std::string, GradReq> reqs;
  for (const auto& [name, shape] : shapes) {
    NDArray values(shape, gpu);  // float32: FillUniform's dtypes
    values.FillUniform(-0.1, 0.1);
    args[name] = c.dtype == DType::kFloat32
                     ? values
                     : Invoke("Cast", {values}, {{"dtype", std::string(DTypeName(c.dtype))}})[0];
    grads[name] = NDArray(shape, gpu, c.dtype);
    reqs[name] = name == "parameters" ? c.params : GradReq::kWrite;
  }
  const Symbol rnn = Symbol::Op("RNN",
                                {Symbol::Variable("data"), Symbol::Variable("parameters"),
                                 Symbol::Variable("state"), Symbol::Variable("state_cell")},
                                AttrsOf(c));
  auto exec = Executor::Bind(rnn, gpu, args, grads, reqs);
  exec->Forward(true);
  exec->Backward();
  for (const auto& [name, g] : grads) g.WaitToRead();
}

// Kernels per op name and track (CUPTI's stream id, and whether they ran inside a CUDA graph) in
// a profiler trace, and the streams the trace names (the engine's own).
struct KernelsByStream {
  std::map<std::string, std::map<std::pair<uint32_t, bool>, int>> kernels;
  std::set<uint32_t> engine_streams;
  std::string
      missing;  // why CUPTI recorded no device work (another tool holds it); empty if it did
};

KernelsByStream Read(const std::string& path) {
  std::ifstream in(path);
  const json trace = json::parse(in);
  std::map<uint64_t, std::string> op_names;
  for (const json& e : trace.at("traceEvents"))
    if (e.value("ph", "") == "X" && e.value("cat", "") == "op" && e["args"].contains("op"))
      op_names[e["args"]["op"].get<uint64_t>()] = e.value("name", "");
  KernelsByStream k;
  const std::string device_trace = trace.at("otherData").value("device_trace", "");
  if (device_trace.find("not recorded") != std::string::npos) k.missing = device_trace;
  for (const json& e : trace.at("traceEvents")) {
    const bool gpu = e.value("pid", 0) >= 10;
    if (gpu && e.value("ph", "") == "M" && e.value("name", "") == "thread_name" &&
        e["args"].value("name", "").find(" stream ") == std::string::npos)
      k.engine_streams.insert(e.value("tid", 0));
    if (!gpu || e.value("ph", "") != "X" || e.value("cat", "") != "kernel") continue;
    const uint64_t op = e["args"].value("op", uint64_t{0});
    const bool in_graph = e["args"].value("launch", "").find(" graph ") != std::string::npos;
    k.kernels[op_names.count(op) ? op_names[op] : "?"][{e.value("tid", 0), in_graph}]++;
  }
  return k;
}

// "3 on cuDNN's 42 (non-blocking)", "11 in a graph on its own 70" (a stream CUDA runs a graph's
// branches on: not made through an API call)
std::string Describe(const KernelsByStream& k, uint32_t stream, bool in_graph, int count) {
  const bool engine = k.engine_streams.count(stream) != 0;
  const int flags = Log().FlagsOf(stream);
  const std::string where = engine                  ? "the engine's "
                            : in_graph && flags < 0 ? "its own "
                                                    : "cuDNN's ";
  return " " + std::to_string(count) + (in_graph ? " in a graph" : "") + " on " + where +
         std::to_string(stream) +
         (flags < 0                       ? ""
          : flags & cudaStreamNonBlocking ? " (non-blocking)"
                                          : " (blocking)");
}

TEST(CudnnStreams, EveryKernelOfTheRnnRunsOnTheOpsStreamOrInItsJoinedGraph) {
  if (!g_watch_error.empty())
    GTEST_SKIP() << "CUPTI's callbacks are not available: " << g_watch_error;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16})
    for (bool bi : {false, true})
      for (GradReq params : {GradReq::kWrite, GradReq::kNull}) {
        const Case c{dtype, bi, params};
        SCOPED_TRACE(c.Name());
        RunLstm(c);  // plans, handles and cuDNN's streams made outside the trace
        const int64_t persistent = RnnPersistentForwards();
        const JoinCounts before = Joins();
        const std::string path = testing::TempPath("cudnn_streams.json");
        Profiler::Start(path);
        RunLstm(c);
        Profiler::Stop();
        EXPECT_EQ(RnnPersistentForwards() - persistent, dtype == DType::kBFloat16 ? 1 : 0);
        // Forward, backward data, and backward weights when the parameters' gradient is asked for.
        EXPECT_EQ(Joins().runs - before.runs, params == GradReq::kNull ? 2 : 3)
            << "a cuDNN call ran unjoined";
        EXPECT_EQ(Joins().unjoined, before.unjoined)
            << "cuDNN left a fork unjoined: the fallback ran";
        const KernelsByStream k = Read(path);
        if (!k.missing.empty()) GTEST_SKIP() << "CUPTI cannot trace here: " << k.missing;
        ASSERT_TRUE(k.kernels.count("_backward_RNN")) << "no kernel of _backward_RNN in the trace";
        std::string seen;
        for (const char* op : {"RNN", "_backward_RNN"}) {
          seen += std::string(" ") + op + ":";
          for (const auto& [track, count] :
               k.kernels.count(op) ? k.kernels.at(op) : decltype(k.kernels)::mapped_type{}) {
            const auto& [stream, in_graph] = track;
            seen += Describe(k, stream, in_graph, count);
            EXPECT_TRUE(in_graph || k.engine_streams.count(stream))
                << op << ": " << count << " kernels on cuDNN's stream " << stream
                << " outside the join's graph: nothing orders them before the op's stream's next "
                   "work";
          }
        }
        std::printf("lstm H64 %s%s:%s\n", c.Name().c_str(),
                    dtype == DType::kBFloat16 ? " (persistent)" : "", seen.c_str());
      }
  std::printf("streams created in this process, by CUPTI id:%s\n", Log().Summary().c_str());
}

}  // namespace
}  // namespace weft::gpu
