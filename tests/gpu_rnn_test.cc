// The GPU RNN (ops/gpu/rnn.cc, cuDNN) against the CPU's on the same inputs, the join after its
// backward data on every path (counted: ops/gpu/internal/rnn_gpu.h), and MXNet's race (PR #16391)
// as a test: a bidirectional 2-layer LSTM whose data gradient is added to the gradient of a second
// consumer of data right after backward data, with the parameters' gradient not requested, 1,000
// times with other work on a second stream, each time equal to the CPU's.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/gpu/cuda_check.h"
#include "executor/executor.h"
#include "graph/symbol.h"
#include "ops/gpu/internal/rnn_gpu.h"
#include "ops/nn/rnn_params.h"
#include "ops/op.h"
#include "storage/ndarray.h"
#include "tests/gpu_op_test_util.h"
#include "weft/imperative.h"

namespace weft::gpu {
namespace {

const Device kGpu = Device::Gpu(0);

struct Config {
  RnnMode mode = RnnMode::kLstm;
  int layers = 2;
  bool bidirectional = true;
  bool lengths = false;
  int64_t t = 5, n = 3, i = 4, h = 6;
  double p = 0;  // dropout between layers
  bool lstm() const { return mode == RnnMode::kLstm; }
  int dirs() const { return bidirectional ? 2 : 1; }
  std::string Name() const {
    return std::string(RnnModeName(mode)) + " L" + std::to_string(layers) +
           (bidirectional ? " bi" : " uni") + (lengths ? " lengths" : "");
  }
};

AttrMap AttrsOf(const Config& c) {
  return {{"mode", RnnModeName(c.mode)},
          {"state_size", std::to_string(c.h)},
          {"num_layers", std::to_string(c.layers)},
          {"bidirectional", c.bidirectional ? "true" : "false"},
          {"state_outputs", "true"},
          {"p", std::to_string(c.p)},
          {"use_sequence_length", c.lengths ? "true" : "false"}};
}

int64_t ParamSize(const Config& c) {
  return RnnParamLayout(ParseAttrs(GetOp("RNN"), AttrsOf(c)).Get<RnnParam>(), c.i).size();
}

std::vector<float> Uniform(uint64_t seed, int64_t n, double scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(u(rng));
  return v;
}

// The op's inputs, as host values: data, parameters, state[, state_cell][, sequence_length].
std::vector<std::pair<std::vector<float>, Shape>> HostInputs(const Config& c) {
  const Shape state{c.layers * c.dirs(), c.n, c.h};
  std::vector<std::pair<std::vector<float>, Shape>> in = {
      {Uniform(1, c.t * c.n * c.i, 1), Shape{c.t, c.n, c.i}},
      {Uniform(2, ParamSize(c), c.h <= 6 ? 0.5 : 1 / std::sqrt(static_cast<double>(c.h))),
       Shape{ParamSize(c)}},
      {Uniform(3, state.Size(), 1), state}};
  if (c.lstm()) in.push_back({Uniform(4, state.Size(), 1), state});
  if (c.lengths) {
    std::vector<float> l(c.n);
    for (int64_t k = 0; k < c.n; ++k) l[k] = static_cast<float>(c.t - k % c.t);
    in.push_back({l, Shape{c.n}});
  }
  return in;
}

// The inputs as arrays for a call on `device`: sequence_length (the last, with lengths) stays a CPU
// array, as the op reads it on the host (Op::host_inputs).
std::vector<NDArray> On(const Config& c,
                        const std::vector<std::pair<std::vector<float>, Shape>>& host,
                        Device device) {
  std::vector<NDArray> in;
  for (size_t k = 0; k < host.size(); ++k) {
    const bool lengths = c.lengths && k + 1 == host.size();
    in.push_back(
        NDArray::FromVector(host[k].first, host[k].second, lengths ? Device::Cpu() : device));
  }
  return in;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double tol,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k)
    ASSERT_NEAR(got[k], want[k], tol * (1 + std::abs(want[k]))) << what << ", element " << k;
}

NDArray As(const NDArray& a, DType dtype) {
  return a.dtype() == dtype ? a
                            : Invoke("Cast", {a}, {{"dtype", std::string(DTypeName(dtype))}})[0];
}

// The host values as `dtype` would hold them (bfloat16 rounds), back in float32.
std::vector<std::pair<std::vector<float>, Shape>> Rounded(
    std::vector<std::pair<std::vector<float>, Shape>> host, DType dtype) {
  for (auto& [v, shape] : host)
    v = As(As(NDArray::FromVector(v, shape), dtype), DType::kFloat32).ToVector<float>();
  return host;
}

// A training forward and a backward on `device` in `dtype` (data, parameters, states and the
// output gradients; lengths as int32), on values rounded as `rounding` holds them: the visible
// outputs, then every requested input gradient (parameters' with `params_req`), as float32.
std::vector<std::vector<float>> ForwardBackward(const Config& c, Device device, OpReq params_req,
                                                DType dtype = DType::kFloat32,
                                                DType rounding = DType::kFloat32) {
  const Op& op = GetOp("RNN");
  const Attrs attrs = ParseAttrs(op, AttrsOf(c));
  std::vector<NDArray> in = On(c, Rounded(HostInputs(c), rounding), device);
  for (size_t k = 0; k < in.size(); ++k)
    in[k] = As(in[k], c.lengths && k + 1 == in.size() ? DType::kInt32 : dtype);
  const std::vector<NDArray> out = Invoke("RNN", in, AttrsOf(c), {.is_train = true});
  std::vector<NDArray> heads, grads;
  for (size_t o = 0; o + 1 < out.size(); ++o) {
    const Shape shape = out[o].shape();
    heads.push_back(As(
        NDArray::FromVector(Rounded({{Uniform(10 + o, shape.Size(), 1), shape}}, rounding)[0].first,
                            shape, device),
        dtype));
  }
  heads.push_back(out.back());
  std::vector<OpReq> reqs;
  for (size_t k = 0; k < in.size(); ++k) {
    grads.emplace_back(in[k].shape(), device, in[k].dtype());
    reqs.push_back(c.lengths && k + 1 == in.size() ? OpReq::kNull
                   : k == 1                        ? params_req
                                                   : OpReq::kWrite);
  }
  InvokeBackward(op, attrs, in, out, heads, grads, reqs);
  std::vector<std::vector<float>> values;
  for (size_t o = 0; o + 1 < out.size(); ++o)
    values.push_back(As(out[o], DType::kFloat32).ToVector<float>());
  for (size_t k = 0; k < grads.size(); ++k)
    if (reqs[k] != OpReq::kNull) values.push_back(As(grads[k], DType::kFloat32).ToVector<float>());
  return values;
}

std::vector<Config> Configs() {
  std::vector<Config> all;
  for (RnnMode mode : {RnnMode::kLstm, RnnMode::kGru, RnnMode::kRnnTanh, RnnMode::kRnnRelu})
    for (bool bi : {false, true})
      for (bool lengths : {false, true}) {
        Config c;
        c.mode = mode, c.bidirectional = bi, c.lengths = lengths;
        all.push_back(c);
      }
  return all;
}

// Strict float32: the standard algorithm at every size (ops/gpu/rnn.cc, AlgoFor).
TEST(GpuRnn, ForwardAndBackwardEqualTheCpus) {
  for (Config c : Configs())
    for (int64_t h : {6, 300}) {
      c.h = h;
      SCOPED_TRACE(c.Name() + " H" + std::to_string(h));
      const auto want = ForwardBackward(c, Device::Cpu(), OpReq::kWrite);
      const int64_t persistent = RnnPersistentForwards();
      const auto got = ForwardBackward(c, kGpu, OpReq::kWrite);
      EXPECT_EQ(RnnPersistentForwards() - persistent, 0);
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < want.size(); ++k)
        ExpectNear(got[k], want[k], 1e-4, "value " + std::to_string(k));
    }
}

// ||got - want|| / ||want||, the error of a whole tensor.
double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t e = 0; e < want.size(); ++e) {
    diff += (got[e] - want[e]) * static_cast<double>(got[e] - want[e]);
    norm += want[e] * static_cast<double>(want[e]);
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// bfloat16 data, parameters and gradients (float32 math inside cuDNN) against the CPU's float32 on
// the same rounded values: each tensor within 2% of its norm, and no element off by more than a
// tenth of the tensor's largest value. H 6 without lengths: cuDNN's persistent small-H algorithm;
// H 300 or with lengths: the standard one. relu's gradient is a step of its pre-activation, and
// at H 300 some of the 4,500 pre-activations of a layer lie within bfloat16's rounding of 0, so a
// unit's gradient passes on one side and not the other (measured on the H200: a weight's gradient
// -0.83 against the CPU's 0.02): relu's gradients are compared at H 6, its outputs at both.
TEST(GpuRnn, BFloat16ForwardAndBackwardFollowTheCpusFloat32) {
  double worst = 0;
  std::string worst_at;
  for (Config c : Configs())
    for (int64_t h : {6, 300}) {
      c.h = h;
      SCOPED_TRACE(c.Name() + " H" + std::to_string(h));
      const auto cpu =
          ForwardBackward(c, Device::Cpu(), OpReq::kWrite, DType::kFloat32, DType::kBFloat16);
      const int64_t persistent = RnnPersistentForwards();
      const auto got = ForwardBackward(c, kGpu, OpReq::kWrite, DType::kBFloat16, DType::kBFloat16);
      EXPECT_EQ(RnnPersistentForwards() - persistent, h == 6 && !c.lengths ? 1 : 0);
      ASSERT_EQ(got.size(), cpu.size());
      const size_t outputs = c.lstm() ? 3 : 2;
      const bool gradients = c.mode != RnnMode::kRnnRelu || h == 6;
      for (size_t k = 0; k < (gradients ? cpu.size() : outputs); ++k) {
        const std::string what = "value " + std::to_string(k);
        const double error = RelativeError(got[k], cpu[k]);
        EXPECT_LE(error, 2e-2) << what;
        if (error > worst)
          worst = error, worst_at = c.Name() + " H" + std::to_string(h) + " " + what;
        double largest = 0;
        for (float v : cpu[k]) largest = std::max(largest, static_cast<double>(std::abs(v)));
        for (size_t e = 0; e < cpu[k].size(); ++e)
          ASSERT_NEAR(got[k][e], cpu[k][e], 0.1 * (1 + largest)) << what << ", element " << e;
      }
    }
  std::printf("largest relative error %.4f (%s)\n", worst, worst_at.c_str());
}

// One join per backward, whether the parameters' gradient is requested or not, in one direction
// or two, with lengths or not.
TEST(GpuRnn, EveryBackwardJoinsOnceAfterBackwardData) {
  for (Config c : Configs()) {
    if (c.mode == RnnMode::kRnnRelu) continue;
    for (int64_t h : {6, 300})
      for (OpReq params : {OpReq::kWrite, OpReq::kNull, OpReq::kAddTo}) {
        c.h = h;
        SCOPED_TRACE(c.Name() + " H" + std::to_string(h) + " parameters' request " +
                     std::to_string(static_cast<int>(params)));
        const int64_t joins = RnnBackwardJoins(), calls = RnnBackwardCalls();
        ForwardBackward(c, kGpu, params);
        EXPECT_EQ(RnnBackwardCalls() - calls, 1);
        EXPECT_EQ(RnnBackwardJoins() - joins, 1);
      }
  }
}

// MXNet's race: d_data (request add, parameters' null) summed with tanh's gradient at once, 1,000
// times. Strict float32: the standard algorithm, the seed's (MXNet's fix named the non-persistent
// bidirectional backward data). WEFT_TEST_RNN_SEED_RUNS sets fewer runs: run_tests.sh --sanitize
// runs 20 under racecheck, where the 1,000 take longer than its limit.
TEST(GpuRnn, TheDataGradientSummedRightAfterBackwardDataIsTheCpusEveryTime) {
  const int64_t persistent = RnnPersistentForwards();
  Config c;
  c.t = 16, c.n = 32, c.i = 64, c.h = 128;  // large enough for cuDNN's streams to matter
  const auto host = HostInputs(c);
  const Symbol data = Symbol::Variable("data");
  const Symbol rnn = Symbol::Op("RNN",
                                {data, Symbol::Variable("parameters"), Symbol::Variable("state"),
                                 Symbol::Variable("state_cell")},
                                AttrsOf(c));
  const Symbol net = Symbol::Group({rnn[0], Symbol::Op("tanh", {data})});
  const char* names[] = {"data", "parameters", "state", "state_cell"};
  auto bind = [&](Device device, GradReq data_req) {
    Executor::ArrayMap args, grads;
    for (int k = 0; k < 4; ++k)
      args[names[k]] = NDArray::FromVector(host[k].first, host[k].second, device);
    grads["data"] =
        NDArray::FromVector(std::vector<float>(host[0].first.size(), 0), host[0].second, device);
    std::map<std::string, GradReq> reqs = {{"data", data_req},
                                           {"parameters", GradReq::kNull},
                                           {"state", GradReq::kNull},
                                           {"state_cell", GradReq::kNull}};
    return std::make_pair(Executor::Bind(net, device, args, grads, reqs), grads["data"]);
  };
  auto [cpu, cpu_grad] = bind(Device::Cpu(), GradReq::kWrite);
  cpu->Forward(true);
  cpu->Backward();
  const std::vector<float> want = cpu_grad.ToVector<float>();

  cudaStream_t other = nullptr;
  WEFT_CUDA_CHECK(cudaSetDevice(0));
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  void* busy = nullptr;
  const size_t busy_bytes = size_t{256} << 20;
  WEFT_CUDA_CHECK(cudaMalloc(&busy, busy_bytes));
  auto [gpu, gpu_grad] = bind(kGpu, GradReq::kAdd);
  std::vector<float> before(want.size(), 0);
  const char* runs_env = std::getenv("WEFT_TEST_RNN_SEED_RUNS");
  const int runs = runs_env != nullptr ? std::atoi(runs_env) : 1000;
  ASSERT_GT(runs, 0) << "WEFT_TEST_RNN_SEED_RUNS=" << runs_env
                     << ": expected a positive number of runs";
  for (int run = 0; run < runs; ++run) {
    WEFT_CUDA_CHECK(cudaMemsetAsync(busy, run & 0xff, busy_bytes, other));
    gpu->Forward(true);
    gpu->Backward();
    const std::vector<float> now = gpu_grad.ToVector<float>();
    std::vector<float> added(now.size());
    for (size_t k = 0; k < now.size(); ++k) added[k] = now[k] - before[k];
    ExpectNear(added, want, 2e-3, "run " + std::to_string(run));
    if (::testing::Test::HasFatalFailure()) break;
    before = now;
  }
  WEFT_CUDA_CHECK(cudaStreamSynchronize(other));
  WEFT_CUDA_CHECK(cudaFree(busy));
  WEFT_CUDA_CHECK(cudaStreamDestroy(other));
  EXPECT_EQ(RnnPersistentForwards() - persistent, 0);
}

// ---- dropout between layers: cuDNN's ----

// A 2-layer relu RNN that passes its input through: weight_ih is the identity in both layers and
// every other parameter 0, so on positive data the output is layer 1's input after dropout,
// x * mask / (1 - p), and the gradient of data for an output gradient of ones is mask / (1 - p).
Config PassThrough() {
  Config c;
  c.mode = RnnMode::kRnnRelu, c.layers = 2, c.bidirectional = false, c.p = 0.5;
  c.t = 8, c.n = 16, c.i = c.h = 64;
  return c;
}

std::vector<float> IdentityParams(const Config& c) {
  const RnnParamLayout layout(ParseAttrs(GetOp("RNN"), AttrsOf(c)).Get<RnnParam>(), c.i);
  std::vector<float> w(layout.size(), 0);
  for (int l = 0; l < c.layers; ++l) {
    const RnnBlock b = layout.Block(l, 0);
    for (int64_t k = 0; k < c.h; ++k) w[b.weight_ih + k * b.input + k] = 1;
  }
  return w;
}

std::vector<float> PositiveData(const Config& c) {
  std::vector<float> x = Uniform(21, c.t * c.n * c.i, 0.5);
  for (float& v : x) v += 1;  // in [0.5, 1.5]
  return x;
}

// Which outputs dropout kept; every output must be 0 or x / (1 - p).
std::vector<bool> KeptOf(const std::vector<float>& y, const std::vector<float>& x, double p) {
  std::vector<bool> kept(y.size());
  for (size_t k = 0; k < y.size(); ++k) {
    kept[k] = y[k] != 0;
    if (kept[k]) {
      EXPECT_NEAR(y[k], x[k] / (1 - p), 1e-6) << "output " << k;
    }
  }
  return kept;
}

// The keep rate is 1 - p: 8,192 draws of p = 0.5 keep 4,096 +- 226 (five standard deviations).
void ExpectKeepRate(const std::vector<bool>& kept, double p) {
  const double n = static_cast<double>(kept.size());
  const double count = static_cast<double>(std::count(kept.begin(), kept.end(), true));
  EXPECT_NEAR(count, n * (1 - p), 5 * std::sqrt(n * p * (1 - p)));
}

// Training: outputs are x / (1 - p) or 0 at the keep rate, the backward's data gradient is the
// same mask (so it read the forward's, from the reserve), and the next call draws a new mask.
// Inference: no dropout.
TEST(GpuRnn, DropoutBetweenLayersKeepsAtItsRateAndTheBackwardUsesTheForwardsMask) {
  const Config c = PassThrough();
  const std::vector<float> x = PositiveData(c);
  const Shape state{c.layers, c.n, c.h};
  const std::vector<NDArray> in = {
      NDArray::FromVector(x, Shape{c.t, c.n, c.i}, kGpu),
      NDArray::FromVector(IdentityParams(c), Shape{ParamSize(c)}, kGpu),
      NDArray::FromVector(std::vector<float>(state.Size(), 0), state, kGpu)};
  const Op& op = GetOp("RNN");
  const Attrs attrs = ParseAttrs(op, AttrsOf(c));
  std::vector<std::vector<bool>> masks;
  for (int call = 0; call < 2; ++call) {
    const std::vector<NDArray> out = Invoke("RNN", in, AttrsOf(c), {.is_train = true});
    const std::vector<bool> kept = KeptOf(out[0].ToVector<float>(), x, c.p);
    ExpectKeepRate(kept, c.p);
    std::vector<NDArray> heads = {NDArray(out[0].shape(), kGpu), NDArray(out[1].shape(), kGpu),
                                  out.back()};
    heads[0].Fill(1), heads[1].Fill(0);
    std::vector<NDArray> grads;
    for (const NDArray& a : in) grads.emplace_back(a.shape(), kGpu);
    InvokeBackward(op, attrs, in, out, heads, grads, {OpReq::kWrite, OpReq::kNull, OpReq::kNull});
    const std::vector<float> dx = grads[0].ToVector<float>();
    for (size_t k = 0; k < dx.size(); ++k)
      ASSERT_EQ(dx[k], kept[k] ? 1 / (1 - c.p) : 0) << "d data " << k << ", call " << call;
    masks.push_back(kept);
  }
  EXPECT_NE(masks[0], masks[1]) << "the second call drew the first's mask again";
  const std::vector<float> y = Invoke("RNN", in, AttrsOf(c))[0].ToVector<float>();
  for (size_t k = 0; k < y.size(); ++k) ASSERT_NEAR(y[k], x[k], 1e-6) << "inference, output " << k;
}

// Two streams each get a random state of their own (ops/gpu/internal/rnn_plan.h): a call on one
// never reads or advances the other's, whatever runs at once. A stream keeps its state.
TEST(GpuRnn, RnnsOnTwoStreamsDrawFromStatesOfTheirOwn) {
  const Config c = PassThrough();
  const std::vector<float> x = PositiveData(c);
  const Op& op = GetOp("RNN");
  const testing::OpCall call{"RNN",
                             AttrsOf(c),
                             {Shape{c.t, c.n, c.i}, Shape{ParamSize(c)}, Shape{c.layers, c.n, c.h}},
                             /*is_train=*/true};
  const std::vector<Shape> out_shapes =
      InferShapes(op, ParseAttrs(op, call.attrs), call.input_shapes, DeviceType::kGpu);
  testing::TestStream a, b;
  auto run_on = [&](testing::TestStream& s) {
    std::vector<std::vector<float>> in = {x, IdentityParams(c),
                                          std::vector<float>(call.input_shapes[2].Size(), 0)};
    std::vector<std::vector<float>> out;
    for (const Shape& shape : out_shapes) out.emplace_back(shape.Size(), 0);
    const std::vector<OpReq> req(out.size(), OpReq::kWrite);
    testing::RunCompute(call, kGpu, DType::kFloat32, in, req, out, &s);
    return KeptOf(out[0], x, c.p);
  };
  const std::vector<bool> on_a = run_on(a);
  const void* state_a = RnnDropoutState(a.get().handle());
  const std::vector<bool> on_b = run_on(b);
  const void* state_b = RnnDropoutState(b.get().handle());
  ASSERT_NE(state_a, nullptr);
  ASSERT_NE(state_b, nullptr);
  EXPECT_NE(state_a, state_b) << "two streams share one random state";
  ExpectKeepRate(on_a, c.p);
  ExpectKeepRate(on_b, c.p);
  EXPECT_NE(on_a, on_b) << "two streams drew the same mask";
  run_on(a);
  EXPECT_EQ(RnnDropoutState(a.get().handle()), state_a) << "a stream's state changed";
}

}  // namespace
}  // namespace weft::gpu
