// weft on a GPU against PyTorch (bench/torch_gpu_peer.py) on the same GPU, in the same run:
//   (a) the MLP training step (forward, backward, SGD with momentum) for three nets, float32 and
//       bf16 (bf16 parameters and activations, the loss in float32 after a Cast);
//   (b) imperative launch overhead: microseconds per tiny op, 10,000 ops pushed, one wait;
//   (c) one elementwise op (relu) on 64M floats: GB/s moved, against a device-to-device copy;
//   (d) pointwise fusion (issue 11): the 8-op chain sigmoid(relu(x * a + b) * c - d) * e + f on
//       64M float32, forward and backward, fused and unfused (WEFT_USE_FUSION at Bind) against
//       PyTorch eager and torch.compile, as GB/s counting one read per input and one write per
//       output (forward x -> y; backward x, dy -> dx), against the device copy (goal: fused >= 95%
//       of the copy, and faster than torch.compile); the chain's first bind (NVRTC compile; goal
//       < 0.2 s) and the same graph bound again (cached; goal < 1 ms); a training step of an MLP
//       with bias, GELU and dropout (784-1024-1024-10, batch 128), fusion on and off;
//   (e) the MLP steps through weft::Trainer (issue 13): replayed as CUDA graphs against
//       PyTorch replaying the same step captured with torch.cuda.graph, and pushed op by op
//       (WEFT_CUDA_GRAPH=0) against PyTorch eager;
//   (f) RNNs (issue 12): forward and backward of a 2-layer bidirectional LSTM and GRU, T64 N64
//       I512 H512, strict float32, TF32 (WEFT_GPU_TF32=1) and bfloat16, and H128 TF32 (cuDNN's
//       persistent small-H algorithm on both sides), against nn.LSTM / nn.GRU with
//       torch.backends.cudnn.allow_tf32 off and on (--rnn=0 leaves them out); and what the
//       RNN's join (engine/gpu/stream_join.h) waits for: the LSTM H512 step pushed right after a
//       30 ms one-block spin on a blocking stream against one on a non-blocking stream (a join
//       through the legacy stream waited for the blocking one; the graph join waits for neither),
//       and the graphs it instantiated in the timed steps (0: each was updated in place);
//   (g) Attention (issue 39): forward and backward of B8 H12 T1024 D64 causal attention
//       (GPT-2 124M's), bfloat16 (cuDNN's fused attention) and float32 (weft's register-tiled
//       kernels, then the older ones: WEFT_GPU_TILED_ATTENTION=0), against
//       F.scaled_dot_product_attention
//       (--attention=0 leaves them out);
//   (g') LayerNorm (issue 42): forward and backward over (8192, 768) bfloat16 data with float32
//       gamma and beta (GPT-2's), as ms and as effective bandwidth (the 10 bytes an element the
//       pair must move: x and y forward, x, out_grad and d_x backward) against the device copy's
//       (the relu part's), beside PyTorch's F.layer_norm in bfloat16 (--layernorm=0 leaves it
//       out); pushed op by op, then as a captured step (TrainStep's CUDA graph: the kernels'
//       time);
//   (h) GPT-2 124M's training step (issue 39; --gpt2=B, batch B, off by default): 12 layers, 12
//       heads, width 768, context 1024, vocabulary 50304, parameters and activations in bfloat16
//       (examples::MakeGpt; the loss in float32), bfloat16-mixed and float16-mixed (float32
//       parameters, TrainerOptions::precision, float16 with the loss scaler; PyTorch's under
//       autocast, float16 with a GradScaler), AdamW (betas 0.9, 0.95, weight decay
//       0.1 on the matrices), gradients clipped to global norm 1, through weft::Trainer (replayed
//       as CUDA graphs), against nanoGPT's model in PyTorch (bfloat16 parameters,
//       F.scaled_dot_product_ attention, cross-entropy in float32, AdamW fused where PyTorch has
//       it), eager and torch.compile; ms per step and tokens per second;
//   (i) ResNet-50's training step (issue 42; --resnet50=B, batch B of 224x224 images, off by
//       default): examples::ResNet50 through weft::Trainer (SGD, momentum 0.9, weight decay 5e-4;
//       replayed as CUDA graphs), float32, bfloat16-mixed (the "bfloat16" row: float32 master
//       weights, TrainerOptions::precision) and pure bfloat16 (parameters and activations; weft's
//       alone), both channels last (the GPU's default for 16-bit binds; WEFT_GPU_CHANNELS_LAST=0
//       runs them NCHW), against torchvision's resnet50 with the same optimizer: float32 with TF32
//       off (weft's float32), then channels-last under autocast to bfloat16 (the peer for
//       the bfloat16 row);
// Steps are pushed back to back and waited for once, as a training loop would; times are the
// median of --reps repetitions.
//
//   tools/gpu_bundle.sh; then on the GPU machine: gpu_bundle/bin/gpu_bench [--reps=5]
//   (--mlp=0, --tiny=0, --relu=0, --fusion=0, --rnn=0, --attention=0, --layernorm=0 leave a
//   part out, --gpt2=8
//   adds GPT-2 at batch 8, --resnet50=64 ResNet-50 at batch 64, --peer=0 leaves out
//   PyTorch; --floors_only=1 prints the launch floors, graph costs and the relu kernel alone;
//   --trace=DIR writes one traced step of each GPT-2 and ResNet-50 row to DIR/<row>.json
//   (tools/trace_summary.py); --profile_cost=1 the tiny op and an MLP step with the profiler never
//   started, running, and stopped again)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "bench/fusion_graphs.h"
#include "bench/gpu_floor.h"
#include "bench/peer.h"
#include "engine/gpu/stream_join.h"
#include "examples/common/gpt.h"
#include "examples/common/resnet.h"
#include "weft/weft.h"

namespace {

using weft::DType;
using weft::Executor;
using weft::NDArray;
using weft::Shape;
using weft::Symbol;

const weft::Device kGpu = weft::Device::Gpu(0);

struct Net {
  std::string name;
  std::vector<int> sizes;
  int batch;
};

// Milliseconds per call of `fn` over `n` calls, waiting once at the end; median over reps.
template <typename Fn>
double TimeMs(int reps, int n, Fn&& fn) {
  return bench::MedianUs(reps, n, fn, [] { weft::engine::Engine::Get()->WaitForAll(); }) / 1000;
}

// --trace=DIR: the training rows run one more step under weft::Profiler after their timing, each
// written to DIR/<row>.json (spaces as '_'); tools/trace_summary.py sums one into tables.
std::string g_trace_dir;

// TimeMs, then that traced step.
template <typename Fn>
double TimeStepMs(const std::string& row, int reps, Fn&& step) {
  const double ms = TimeMs(reps, 5, step);
  if (!g_trace_dir.empty()) {
    std::string file = row;
    std::replace(file.begin(), file.end(), ' ', '_');
    weft::Profiler::Start(g_trace_dir + "/" + file + ".json");
    step();
    weft::Profiler::Stop();
  }
  return ms;
}

// `cast_data`: the data input is float32 and cast to `dtype` first (the trainer's data inputs).
Symbol Mlp(const std::vector<int>& sizes, DType dtype, bool cast_data = false) {
  Symbol x = Symbol::Variable("data");
  if (cast_data && dtype != DType::kFloat32)
    x = Symbol::Op("Cast", {x}, {{"dtype", std::string(weft::DTypeName(dtype))}});
  for (size_t i = 1; i < sizes.size(); ++i) {
    x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", std::to_string(sizes[i])}},
                   "fc" + std::to_string(i));
    if (i + 1 < sizes.size()) x = Symbol::Op("relu", {x});
  }
  if (dtype != DType::kFloat32) x = Symbol::Op("Cast", {x}, {{"dtype", "float32"}});
  return Symbol::Op("SoftmaxCrossEntropy", {x, Symbol::Variable("label")}, {}, "loss");
}

// ms per training step of `net` in `dtype` on the GPU.
double MlpStep(const Net& net, DType dtype, int reps) {
  const Symbol loss = Mlp(net.sizes, dtype);
  const auto shapes = weft::InferArgumentShapes(
      loss.ToGraph(), {{"data", Shape{net.batch, net.sizes[0]}}, {"label", Shape{net.batch}}});
  Executor::ArrayMap args, grads;
  std::map<std::string, weft::GradReq> reqs;
  std::vector<std::string> params;
  for (const auto& [name, shape] : shapes) {
    NDArray host(shape);
    if (name == "label") {
      std::vector<float> labels(net.batch);
      for (int i = 0; i < net.batch; ++i) labels[i] = static_cast<float>(i % net.sizes.back());
      host.CopyFrom(labels);
      args[name] = host.Copy(kGpu);
      continue;
    }
    host.FillNormal(0, name == "data" ? 1.0 : 0.02);
    NDArray gpu = host.Copy(kGpu);
    args[name] =
        dtype == DType::kFloat32 ? gpu : weft::Invoke("Cast", {gpu}, {{"dtype", "bfloat16"}})[0];
    if (name == "data") continue;
    params.push_back(name);
    grads[name] = NDArray(shape, kGpu, dtype);
    reqs[name] = weft::GradReq::kWrite;
  }
  auto exec = Executor::Bind(loss, kGpu, args, grads, reqs);
  weft::SGD sgd(0.01, 0.9, 0, 1.0 / net.batch);
  auto step = [&] {
    exec->Forward(true);
    exec->Backward();
    for (size_t i = 0; i < params.size(); ++i)
      sgd.Update(static_cast<int>(i), args.at(params[i]), grads.at(params[i]));
  };
  for (int i = 0; i < 10; ++i) step();
  return TimeMs(reps, 50, step);
}

// ms per training step of `net` in `dtype` through weft::Trainer: the step (forward, backward and
// every parameter's SGD update) as one bound graph, replayed as CUDA graphs after the first steps
// (`cuda_graph`) or pushed op by op (WEFT_CUDA_GRAPH=0 at Bind).
double TrainerStep(const Net& net, DType dtype, bool cuda_graph, int reps) {
  setenv("WEFT_CUDA_GRAPH", cuda_graph ? "1" : "0", 1);
  weft::Trainer trainer(Mlp(net.sizes, dtype, /*cast_data=*/true),
                        {{"data", Shape{net.batch, net.sizes[0]}}, {"label", Shape{net.batch}}},
                        weft::Xavier(), weft::SGD(0.01, 0.9, 0, 1.0 / net.batch),
                        {.device = kGpu, .dtype = dtype});
  unsetenv("WEFT_CUDA_GRAPH");
  trainer.data("data").FillNormal(0, 1);
  std::vector<float> labels(net.batch);
  for (int i = 0; i < net.batch; ++i) labels[i] = static_cast<float>(i % net.sizes.back());
  NDArray::FromVector(labels, Shape{net.batch}).CopyTo(trainer.data("label"));
  for (int i = 0; i < 10; ++i) trainer.Step();
  return TimeMs(reps, 50, [&] { trainer.Step(); });
}

// ms per forward and backward (data and parameters' gradients, head gradient ones) of a 2-layer
// bidirectional `mode` RNN, T64 N64 I512 (issue 12's benchmark) of state size h, in `precision`:
// "float32" (strict), "tf32" (float32 through TF32 tensor cores: WEFT_GPU_TF32=1, which each call
// reads to find its plan, so the caller keeps it set while it runs the executor: Tf32Scope) or
// "bfloat16".
std::unique_ptr<Executor> BindRnn(const char* mode, const std::string& precision, int64_t h) {
  const int64_t t = 64, n = 64, i = 512, layers_times_dirs = 2 * 2;
  const DType dtype = precision == "bfloat16" ? DType::kBFloat16 : DType::kFloat32;
  std::vector<Symbol> inputs = {Symbol::Variable("data"), Symbol::Variable("parameters"),
                                Symbol::Variable("state")};
  if (std::string(mode) == "lstm") inputs.push_back(Symbol::Variable("state_cell"));
  const Symbol net = Symbol::Op("RNN", inputs,
                                {{"mode", mode},
                                 {"state_size", std::to_string(h)},
                                 {"num_layers", "2"},
                                 {"bidirectional", "true"}});
  const auto shapes = weft::InferArgumentShapes(
      net.ToGraph(), {{"data", Shape{t, n, i}}, {"state", Shape{layers_times_dirs, n, h}}});
  Executor::ArrayMap args, grads;
  std::map<std::string, weft::GradReq> reqs;
  for (const auto& [name, shape] : shapes) {
    NDArray values(shape, kGpu);
    values.FillUniform(-0.05, 0.05);
    args[name] = dtype == DType::kFloat32
                     ? values
                     : weft::Invoke("Cast", {values}, {{"dtype", "bfloat16"}})[0];
    if (name != "data" && name != "parameters") continue;
    grads[name] = NDArray(shape, kGpu, dtype);
    reqs[name] = weft::GradReq::kWrite;
  }
  auto exec = Executor::Bind(net, kGpu, args, grads, reqs);
  for (int k = 0; k < 3; ++k) exec->Forward(true), exec->Backward();  // plans, workspace, reserve
  weft::engine::Engine::Get()->WaitForAll();
  return exec;
}

// The attention row's suffix for the same call on attention.cuh's kernels, not the tiled ones
// (WEFT_GPU_TILED_ATTENTION=0), compared with PyTorch's row of that dtype.
constexpr const char* kUntiledRow = ", untiled";

// ms per forward and backward (d_q, d_k, d_v; head gradient ones) of causal attention over q, k,
// v of (b, h, t, d) in `dtype`, bound once.
double AttentionStepMs(int64_t b, int64_t h, int64_t t, int64_t d, DType dtype, int reps) {
  const Symbol net =
      Symbol::Op("Attention", {Symbol::Variable("q"), Symbol::Variable("k"), Symbol::Variable("v")},
                 {{"causal", "true"}});
  Executor::ArrayMap args, grads;
  std::map<std::string, weft::GradReq> reqs;
  for (const char* name : {"q", "k", "v"}) {
    NDArray values(Shape{b, h, t, d}, kGpu);
    values.FillUniform(-1, 1);
    args[name] =
        dtype == DType::kFloat32
            ? values
            : weft::Invoke("Cast", {values}, {{"dtype", weft::DTypeName(dtype).data()}})[0];
    grads[name] = NDArray(Shape{b, h, t, d}, kGpu, dtype);
    reqs[name] = weft::GradReq::kWrite;
  }
  auto exec = Executor::Bind(net, kGpu, args, grads, reqs);
  for (int k = 0; k < 3; ++k) exec->Forward(true), exec->Backward();  // kernels, cuDNN's plans
  weft::engine::Engine::Get()->WaitForAll();
  return TimeMs(reps, 10, [&] { exec->Forward(true), exec->Backward(); });
}

// The LayerNorm row's suffix for the same pair as one captured step (Executor::TrainStep, replayed
// as a CUDA graph: the kernels' time without the host's), compared with PyTorch's eager row.
constexpr const char* kCapturedRow = ", captured";

// ms per forward and backward of LayerNorm over (rows, cols) bfloat16 data, float32 gamma and
// beta (section g'), bound once, every gradient written: Forward(true) and Backward() pushed op by
// op, or (`captured`) TrainStep's replay of them.
double LayerNormStepMs(int64_t rows, int64_t cols, int reps, bool captured) {
  const Symbol net = Symbol::Op(
      "LayerNorm", {Symbol::Variable("data"), Symbol::Variable("gamma"), Symbol::Variable("beta")},
      {}, "ln");
  NDArray data(Shape{rows, cols}, kGpu);
  data.FillUniform(-1, 1);
  NDArray gamma(Shape{cols}, kGpu), beta(Shape{cols}, kGpu);
  gamma.Fill(1), beta.Fill(0);
  Executor::ArrayMap args = {{"data", weft::Invoke("Cast", {data}, {{"dtype", "bfloat16"}})[0]},
                             {"gamma", gamma},
                             {"beta", beta}};
  Executor::ArrayMap grads;
  std::map<std::string, weft::GradReq> reqs;
  for (const auto& [name, array] : args) {
    grads[name] = NDArray(array.shape(), kGpu, array.dtype());
    reqs[name] = weft::GradReq::kWrite;
  }
  auto exec = Executor::Bind(net, kGpu, args, grads, reqs);
  const auto step = [&] { captured ? exec->TrainStep() : (exec->Forward(true), exec->Backward()); };
  for (int k = 0; k < 3; ++k) step();  // kernels; a captured step records its graphs
  weft::engine::Engine::Get()->WaitForAll();
  return TimeMs(reps, 10, step);
}

// GPT-2 124M's configuration in `dtype` (section h).
examples::GptConfig Gpt2Config(DType dtype) {
  return {.vocab = 50304, .context = 1024, .layers = 12, .heads = 12, .width = 768, .dtype = dtype};
}

// ms per training step of GPT-2 124M at `batch` windows of 1024 random tokens (section h): in
// bfloat16 (precision kFloat32), or float32 with `precision` mixed (float16: the loss scaler).
double Gpt2StepMs(const std::string& row, int batch, weft::Precision precision, int reps) {
  const bool mixed = precision != weft::Precision::kFloat32;
  const DType dtype = mixed ? DType::kFloat32 : DType::kBFloat16;
  const examples::GptConfig c = Gpt2Config(dtype);
  weft::TrainerOptions options{.device = kGpu, .dtype = dtype, .precision = precision};
  options.clip_global_norm = 1.0;
  options.initialize = [c](const std::string& name, const NDArray& array) {
    return examples::InitializeGpt(c, name, array);
  };
  weft::AdamW adamw(6e-4, 0.9, 0.95, 1e-8, 0.1, 1.0 / (batch * c.context));
  adamw.set_decay_filter(weft::DecayMatricesOnly);
  const Shape bt{batch, c.context};
  weft::Trainer trainer(examples::MakeGpt(c).loss, examples::GptDataShapes(batch, c.context),
                        weft::Zero(), adamw, options);
  std::mt19937 rng(0);
  std::uniform_int_distribution<int> token(0, c.vocab - 1);
  for (const char* name : {"data", "label"}) {
    std::vector<float> ids(batch * c.context);
    for (float& id : ids) id = static_cast<float>(token(rng));
    NDArray::FromVector(ids, bt).CopyTo(trainer.data(name));
  }
  NDArray::FromVector(examples::Positions(c.context), Shape{c.context})
      .CopyTo(trainer.data("positions"));
  for (int i = 0; i < 5; ++i) trainer.Step();  // kernels, plans, the step's graphs
  return TimeStepMs(row, reps, [&] { trainer.Step(); });
}

// ms per training step of ResNet-50 at `batch` random 224x224 images in `dtype` (section i), or
// float32 with `precision` mixed.
double ResNet50StepMs(const std::string& row, int batch, DType dtype, weft::Precision precision,
                      int reps) {
  examples::ResNetConfig config = examples::ResNet50(1000, examples::Stem::kImageNet);
  config.dtype = dtype;
  const weft::Symbol loss =
      weft::Symbol::Op("SoftmaxCrossEntropy",
                       {examples::ResNet(config), weft::Symbol::Variable("label")}, {}, "loss");
  weft::TrainerOptions options{.device = kGpu, .dtype = dtype, .precision = precision};
  weft::Trainer trainer(loss, {{"data", Shape{batch, 3, 224, 224}}, {"label", Shape{batch}}},
                        weft::Xavier(), weft::SGD(0.01, 0.9, 5e-4, 1.0 / batch), options);
  std::vector<float> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = static_cast<float>(i % 1000);
  NDArray::FromVector(labels, Shape{batch}).CopyTo(trainer.data("label"));
  trainer.data("data").FillNormal(0, 1);
  for (int i = 0; i < 3; ++i) trainer.Step();  // plans, workspaces, the step's graphs
  return TimeStepMs(row, reps, [&] { trainer.Step(); });
}

// WEFT_GPU_TF32=1 for the scope when `precision` is "tf32", after the work pushed in it is done.
class Tf32Scope {
 public:
  explicit Tf32Scope(const std::string& precision) : on_(precision == "tf32") {
    if (on_) setenv("WEFT_GPU_TF32", "1", 1);
  }
  ~Tf32Scope() {
    weft::engine::Engine::Get()->WaitForAll();
    if (on_) unsetenv("WEFT_GPU_TF32");
  }

 private:
  bool on_;
};

double RnnStepMs(const char* mode, const std::string& precision, int64_t h, int reps) {
  const Tf32Scope tf32(precision);
  auto exec = BindRnn(mode, precision, h);
  return TimeMs(reps, 10, [&] { exec->Forward(true), exec->Backward(); });
}

// What the RNN's join waits for: ms of one forward+backward of `exec` pushed right after a
// one-block kernel spinning for `spin_ms` was queued on a stream of the benchmark's own, blocking
// (as weft's workers' streams are: an event on the legacy stream would wait for it) or
// non-blocking; the median of `reps`.
double RnnBesideSpinMs(Executor& exec, bool blocking, double spin_ms, int reps) {
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    bench::SpinningStream spinning(blocking, spin_ms);
    const auto start = std::chrono::steady_clock::now();
    exec.Forward(true), exec.Backward();
    weft::engine::Engine::Get()->WaitForAll();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }  // each spin ends before the next repetition
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Microseconds per tiny in-place add (16 floats), 10,000 pushed, one wait: a += b each time (as
// PyTorch's a.add_(b)), or with `arrays` > 1, a_0 += b, a_1 += b, ... in turn (3 arrays: no batch
// of 64 repeats the last one's arguments, so every graph node is set again).
double LaunchOverheadUs(int reps, int arrays = 1) {
  NDArray b(Shape{16}, kGpu);
  b.Fill(1);
  std::vector<std::vector<NDArray>> ins, outs;
  for (int i = 0; i < arrays; ++i) {
    NDArray a(Shape{16}, kGpu);
    a.Fill(0);
    ins.push_back({a, b}), outs.push_back({a});
  }
  const weft::Op& add = weft::GetOp("add");
  const weft::Attrs attrs = weft::ParseAttrs(add, {});
  int next = 0;
  auto op = [&] {
    weft::InvokeInto(add, attrs, ins[next], outs[next]);
    next = next + 1 == arrays ? 0 : next + 1;
  };
  for (int i = 0; i < 1000; ++i) op();
  return 1000 * TimeMs(reps, 10000, op);
}

struct Bandwidth {
  double relu_gbs, copy_gbs;
};

// relu and a device-to-device copy of 64M floats: bytes read plus bytes written per second.
Bandwidth ElementwiseBandwidth(int reps) {
  const int64_t n = int64_t{64} << 20;
  NDArray x(Shape{n}, kGpu), y(Shape{n}, kGpu);
  x.Fill(-0.5);
  const weft::Op& relu = weft::GetOp("relu");
  const weft::Attrs attrs = weft::ParseAttrs(relu, {});
  const std::vector<NDArray> in = {x}, out = {y};
  const double bytes = 2.0 * n * sizeof(float);
  const double relu_ms = TimeMs(reps, 20, [&] { weft::InvokeInto(relu, attrs, in, out); });
  const double copy_ms = TimeMs(reps, 20, [&] { x.CopyTo(y); });
  return {bytes / relu_ms / 1e6, bytes / copy_ms / 1e6};
}

// ---- (d) pointwise fusion ----

constexpr int64_t kChainElements = int64_t{64} << 20;

struct ChainTimes {
  double forward_ms, backward_ms;
};

// The chain on 64M floats bound with fusion on or off, twice: for inference (a forward that keeps
// nothing for a backward), and for training, whose backward (dx for a fixed dy) runs after one
// forward.
ChainTimes TimeChain(bool fusion, int reps) {
  setenv("WEFT_USE_FUSION", fusion ? "1" : "0", 1);
  NDArray host(Shape{kChainElements});
  host.FillUniform(-2, 2);
  NDArray x = host.Copy(kGpu), dy = host.Copy(kGpu), dx(Shape{kChainElements}, kGpu);
  const Symbol chain = bench::Chain(Symbol::Variable("x"));
  auto inference = Executor::Bind(chain, kGpu, {{"x", x}});
  auto training =
      Executor::Bind(chain, kGpu, {{"x", x}}, {{"x", dx}}, {{"x", weft::GradReq::kWrite}});
  unsetenv("WEFT_USE_FUSION");
  ChainTimes t;
  inference->Forward(/*is_train=*/false);
  t.forward_ms = TimeMs(reps, 20, [&] { inference->Forward(/*is_train=*/false); });
  training->Forward(/*is_train=*/true);
  // dy goes once into the executor's head-gradient array, which each Backward reads in place (as
  // PyTorch's autograd.grad reads its dy): the row times the backward, not a copy of dy.
  dy.CopyTo(training->head_grads().at(0));
  t.backward_ms = TimeMs(reps, 20, [&] { training->Backward(training->head_grads()); });
  return t;
}

// Milliseconds of Executor::Bind of the chain on 4096 floats, fused: the first bind in this
// process compiles its kernel; the second finds it in the cache.
std::pair<double, double> ChainBindMs() {
  NDArray x(Shape{4096}, kGpu);
  x.Fill(0.5);
  const Symbol chain = bench::Chain(Symbol::Variable("x"));
  double ms[2];
  for (double& m : ms) {
    weft::engine::Engine::Get()->WaitForAll();
    const auto start = std::chrono::steady_clock::now();
    auto exec = Executor::Bind(chain, kGpu, {{"x", x}});
    m = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  return {ms[0], ms[1]};
}

double MlpGeluStepMs(bool fusion, int reps) {
  setenv("WEFT_USE_FUSION", fusion ? "1" : "0", 1);
  bench::TrainStep step = bench::BindGeluMlp({784, 1024, 1024, 10}, 128, kGpu);
  unsetenv("WEFT_USE_FUSION");
  for (int i = 0; i < 10; ++i) step.Run();
  return TimeMs(reps, 50, [&] { step.Run(); });
}

double ChainGbs(double arrays, double ms) {
  return arrays * kChainElements * sizeof(float) / ms / 1e6;
}

// One row: GB/s of weft fused, weft unfused, torch eager, torch.compile (n/a when absent).
void ChainRow(const char* what, double arrays, double fused_ms, double unfused_ms,
              const nlohmann::json& r, const std::string& key) {
  auto peer = [&](const std::string& k) {
    return r.contains(k) ? ChainGbs(arrays, r[k].get<double>()) : 0.0;
  };
  std::printf("%-36s %10.0f %10.0f %10.0f %10.0f\n", what, ChainGbs(arrays, fused_ms),
              ChainGbs(arrays, unfused_ms), peer(key + " eager"), peer(key + " compile"));
}

void FusionRows(int reps, double copy_gbs, const nlohmann::json& torch) {
  const auto [first_bind, cached_bind] = ChainBindMs();
  const ChainTimes fused = TimeChain(true, reps), unfused = TimeChain(false, reps);
  const double mlp_on = MlpGeluStepMs(true, reps), mlp_off = MlpGeluStepMs(false, reps);
  const nlohmann::json r = torch.value("results", nlohmann::json::object());
  std::printf("\nthe 8-op chain on 64M float32, GB/s (0: not measured)  %10s %10s %10s %10s\n",
              "fused", "unfused", "eager", "compile");
  ChainRow("forward (x -> y)", 2, fused.forward_ms, unfused.forward_ms, r, "chain forward ms");
  ChainRow("backward (x, dy -> dx)", 3, fused.backward_ms, unfused.backward_ms, r,
           "chain backward ms");
  for (const char* error : {"chain compile error", "chain eager error"}) {
    if (r.contains(error))
      std::printf("PyTorch %s: %s\n", error, r[error].get<std::string>().c_str());
  }
  std::printf("fused forward: %.1f%% of weft's device copy (%.0f GB/s), %.2fx unfused",
              100 * ChainGbs(2, fused.forward_ms) / copy_gbs, copy_gbs,
              unfused.forward_ms / fused.forward_ms);
  if (r.contains("chain forward ms compile")) {
    std::printf(", %.2fx torch.compile's speed",
                r["chain forward ms compile"].get<double>() / fused.forward_ms);
  }
  std::printf("; backward %.2fx unfused\n", unfused.backward_ms / fused.backward_ms);
  std::printf(
      "the chain's first bind (NVRTC compile) %.1f ms (goal < 200), bound again (cached) %.3f ms "
      "(goal < 1)%s\n",
      first_bind, cached_bind, std::getenv("WEFT_RTC_CACHE") ? " [WEFT_RTC_CACHE is set]" : "");
  std::printf(
      "MLP 784-1024-1024-10 (bias, GELU, dropout), batch 128, training step: %.3f ms fused, %.3f "
      "ms unfused "
      "(%.2fx)\n",
      mlp_on, mlp_off, mlp_off / mlp_on);
}

void PrintRow(const char* what, double weft_value, const nlohmann::json& peer, const char* key,
              const char* unit) {
  if (peer.contains(key)) {
    const double t = peer[key].get<double>();
    std::printf("%-44s %12.3f %12.3f %8.2f  %s\n", what, weft_value, t, weft_value / t, unit);
  } else {
    std::printf("%-44s %12.3f %12s %8s  %s\n", what, weft_value, "n/a", "n/a", unit);
  }
}

// The profiler's cost: a tiny op and an MLP step before it ever started (what every run pays for
// its hooks), while it traces (host spans, CUPTI, memory samples), and after it stopped.
int ProfileCost(int reps) {
  const Net net{"784-1024-1024-10", {784, 1024, 1024, 10}, 128};
  const std::string trace = "/tmp/weft_gpu_bench_profile.json";
  double tiny[3], step[3];
  for (int phase = 0; phase < 3; ++phase) {
    if (phase == 1) weft::Profiler::Start(trace);
    tiny[phase] = LaunchOverheadUs(reps);
    step[phase] = MlpStep(net, DType::kFloat32, reps);
    if (phase == 1) weft::Profiler::Stop();
  }
  std::remove(trace.c_str());
  std::printf("%-44s %12s %12s %12s\n", "profiler", "never on", "on", "off again");
  std::printf("%-44s %12.3f %12.3f %12.3f  us/op\n", "tiny op us", tiny[0], tiny[1], tiny[2]);
  std::printf("%-44s %12.3f %12.3f %12.3f  ms/step\n",
              ("mlp " + net.name + " b128 float32").c_str(), step[0], step[1], step[2]);
  weft::engine::Engine::Get()->Shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int reps = bench::IntFlag(argc, argv, "reps", 5);
    g_trace_dir = bench::StringFlag(argc, argv, "trace", "");
    bench::ChdirToWorkspace();
    if (bench::IntFlag(argc, argv, "profile_cost", 0)) return ProfileCost(reps);
    if (bench::IntFlag(argc, argv, "floors_only", 0)) {  // --floors_only=1: the launch floors alone
      std::printf(
          "launch floors (us): runtime %.2f, non-blocking stream %.2f, driver API %.2f, empty "
          "engine op %.2f\n",
          bench::RawLaunchUs(reps, true), bench::RawLaunchUs(reps, false),
          bench::DriverLaunchUs(reps), bench::EmptyEngineOpUs(reps));
      for (int nodes : {16, 256}) {
        const bench::GraphCosts g = bench::GraphLaunchUs(reps, nodes);
        std::printf(
            "graph of %d tiny kernels, per kernel (us): built %.2f, parameters set %.2f (host "
            "only); "
            "built and instantiated %.2f, built and updated %.2f, parameters set %.2f, replayed "
            "%.2f (each "
            "with its launch)\n",
            nodes, g.build_us, g.set_params_host_us, g.instantiate_us, g.update_us, g.set_params_us,
            g.replay_us);
      }
      int sms = 0;
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
      const unsigned wave = 8u * sms;  // resident blocks of 256 threads
      std::printf(
          "relu kernel on 64M floats alone, CUDA events (GB/s): 1 wave of blocks %.0f, 4 waves "
          "%.0f, a 16-byte "
          "pack per thread (%u blocks) %.0f; cudaMemcpyAsync %.0f\n",
          bench::KernelOnlyGbs(reps, wave, false), bench::KernelOnlyGbs(reps, 4 * wave, false),
          65536u, bench::KernelOnlyGbs(reps, 65536, false), bench::KernelOnlyGbs(reps, 0, true));
      return 0;
    }
    // --mlp=0, --tiny=0, --relu=0 leave a part out; --peer=0 leaves PyTorch out.
    const bool mlp = bench::IntFlag(argc, argv, "mlp", 1),
               tiny = bench::IntFlag(argc, argv, "tiny", 1);
    const bool relu = bench::IntFlag(argc, argv, "relu", 1),
               peer = bench::IntFlag(argc, argv, "peer", 1);
    const bool fusion = bench::IntFlag(argc, argv, "fusion", 1);
    const std::vector<Net> nets = {{"64-256-256-10", {64, 256, 256, 10}, 128},
                                   {"784-1024-1024-10", {784, 1024, 1024, 10}, 128},
                                   {"4096-4096-4096-10", {4096, 4096, 4096, 10}, 1024}};
    nlohmann::json ours;
    for (const Net& net : mlp ? nets : std::vector<Net>{}) {
      for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
        const std::string key = "mlp " + net.name + " b" + std::to_string(net.batch) + " " +
                                std::string(weft::DTypeName(dtype));
        try {
          ours[key] = MlpStep(net, dtype, reps);
          ours[key + " trainer, CUDA graph"] = TrainerStep(net, dtype, true, reps);
          ours[key + " trainer, no graph"] = TrainerStep(net, dtype, false, reps);
        } catch (const weft::Error& e) {  // report the workload, measure the others
          std::printf("%s: error: %s\n", key.c_str(), e.what());
          try {
            weft::engine::Engine::Get()->WaitForAll();
          } catch (const weft::Error&) {
          }
        }
      }
    }
    if (bench::IntFlag(argc, argv, "rnn", 1)) {
      const std::pair<int64_t, const char*> rows[] = {
          {512, "float32"}, {512, "tf32"}, {512, "bfloat16"}, {128, "tf32"}};
      for (const char* mode : {"lstm", "gru"}) {
        for (const auto& [h, precision] : rows) {
          const std::string key = std::string(mode) + " T64 N64 I512 H" + std::to_string(h) +
                                  " L2 bi fwd+bwd " + precision;
          try {
            ours[key] = RnnStepMs(mode, precision, h, reps);
          } catch (const weft::Error& e) {
            std::printf("%s: error: %s\n", key.c_str(), e.what());
          }
        }
      }
      // The join's cost (weft only): the step beside a 30 ms spin on a blocking stream, against
      // beside one on a non-blocking stream (the step's own time, about 11 ms).
      auto lstm = BindRnn("lstm", "float32", 512);
      RnnBesideSpinMs(*lstm, false, 0, 2);  // the join's graphs instantiated before the count
      const weft::gpu::JoinCounts before = weft::gpu::Joins();
      const double blocked = RnnBesideSpinMs(*lstm, true, 30, reps);
      const double unblocked = RnnBesideSpinMs(*lstm, false, 30, reps);
      const weft::gpu::JoinCounts after = weft::gpu::Joins();
      std::printf(
          "lstm H512 float32 fwd+bwd beside a 30 ms spin on a blocking stream %.3f ms, on a "
          "non-blocking "
          "stream %.3f ms (the join waits for %.3f ms of other streams' work); %lld cuDNN calls "
          "joined as "
          "graphs, %lld instantiated, %lld unjoined\n",
          blocked, unblocked, blocked - unblocked, static_cast<long long>(after.runs - before.runs),
          static_cast<long long>(after.instantiations - before.instantiations),
          static_cast<long long>(after.unjoined - before.unjoined));
    }
    if (bench::IntFlag(argc, argv, "attention", 1)) {
      for (DType dtype : {DType::kBFloat16, DType::kFloat32}) {
        const std::string key =
            "attention B8 H12 T1024 D64 causal fwd+bwd " + std::string(weft::DTypeName(dtype));
        try {
          ours[key] = AttentionStepMs(8, 12, 1024, 64, dtype, reps);
          if (dtype != DType::kFloat32) continue;
          setenv("WEFT_GPU_TILED_ATTENTION", "0", 1);  // the same call on the older kernels
          ours[key + kUntiledRow] = AttentionStepMs(8, 12, 1024, 64, dtype, reps);
        } catch (const weft::Error& e) {
          std::printf("%s: error: %s\n", key.c_str(), e.what());
        }
        unsetenv("WEFT_GPU_TILED_ATTENTION");
      }
    }
    const bool layernorm = bench::IntFlag(argc, argv, "layernorm", 1) != 0;
    const std::string ln_key = "layernorm 8192x768 fwd+bwd bfloat16";
    if (layernorm) {
      try {
        ours[ln_key] = LayerNormStepMs(8192, 768, reps, /*captured=*/false);
        ours[ln_key + kCapturedRow] = LayerNormStepMs(8192, 768, reps, /*captured=*/true);
      } catch (const weft::Error& e) {
        std::printf("%s: error: %s\n", ln_key.c_str(), e.what());
      }
    }
    const int gpt2 = bench::IntFlag(argc, argv, "gpt2", 0);
    const std::string gpt2_key = "gpt2 124M train step b" + std::to_string(gpt2) + " ";
    // The rows: pure bfloat16 parameters and activations; bfloat16-mixed and float16-mixed (float32
    // master weights; float16 with the loss scaler), against PyTorch's autocast (and GradScaler).
    const std::pair<const char*, weft::Precision> gpt2_rows[] = {
        {"bfloat16", weft::Precision::kFloat32},
        {"bfloat16-mixed", weft::Precision::kBFloat16Mixed},
        {"float16-mixed", weft::Precision::kFloat16Mixed}};
    for (const auto& [name, precision] : gpt2_rows) {
      if (gpt2 == 0) break;
      const std::string key = gpt2_key + name;
      try {
        ours[key] = Gpt2StepMs(key, gpt2, precision, reps);
        std::printf("%s: weft %.3f ms, %.0f tokens/s\n", key.c_str(), ours[key].get<double>(),
                    1024.0 * gpt2 * 1e3 / ours[key].get<double>());
        std::fflush(stdout);
      } catch (const weft::Error& e) {
        std::printf("%s: error: %s\n", key.c_str(), e.what());
      }
    }
    const int resnet50 = bench::IntFlag(argc, argv, "resnet50", 0);
    // The rows: float32; bfloat16-mixed (the "bfloat16" row, against PyTorch's autocast); pure
    // bfloat16 parameters and activations (weft's alone).
    const std::tuple<const char*, DType, weft::Precision> resnet_rows[] = {
        {"float32", DType::kFloat32, weft::Precision::kFloat32},
        {"bfloat16", DType::kFloat32, weft::Precision::kBFloat16Mixed},
        {"bfloat16 pure", DType::kBFloat16, weft::Precision::kFloat32}};
    for (const auto& [name, dtype, precision] : resnet_rows) {
      if (resnet50 == 0) break;
      const std::string key = "resnet50 train step b" + std::to_string(resnet50) + " " + name;
      try {
        ours[key] = ResNet50StepMs(key, resnet50, dtype, precision, reps);
      } catch (const weft::Error& e) {
        std::printf("%s: error: %s\n", key.c_str(), e.what());
      }
    }
    if (tiny) {
      ours["tiny op us"] = LaunchOverheadUs(reps);
      ours["tiny op us, 3 arrays in turn"] = LaunchOverheadUs(reps, 3);
    }
    const Bandwidth bw = relu || fusion ? ElementwiseBandwidth(reps) : Bandwidth{0, 0};
    if (relu) ours["relu GB/s"] = bw.relu_gbs, ours["copy GB/s"] = bw.copy_gbs;
    weft::engine::Engine::Get()->WaitForAll();
    const double raw_launch = bench::RawLaunchUs(reps, true),
                 raw_nonblocking = bench::RawLaunchUs(reps, false);
    const double driver_launch = bench::DriverLaunchUs(reps),
                 empty_op = bench::EmptyEngineOpUs(reps);

    // The peer runs the parts weft ran.
    std::string peer_args = std::to_string(reps);
    const std::pair<bool, const char*> parts[] = {
        {mlp, "mlp"},
        {bench::IntFlag(argc, argv, "rnn", 1) != 0, "rnn"},
        {bench::IntFlag(argc, argv, "attention", 1) != 0, "attention"},
        {layernorm, "layernorm"},
        {tiny, "tiny"},
        {relu, "relu"},
        {fusion, "chain"}};
    for (const auto& [on, part] : parts) {
      if (on) peer_args += std::string(" ") + part;
    }
    if (gpt2 > 0) peer_args += " gpt2=" + std::to_string(gpt2);
    if (resnet50 > 0) peer_args += " resnet50=" + std::to_string(resnet50);
    const nlohmann::json torch =
        peer ? bench::RunPeer("bench/torch_gpu_peer.py", peer_args)
             : nlohmann::json{{"available", false}, {"error", "left out (--peer=0)"}};
    if (torch.value("available", false)) {
      std::printf("PyTorch %s on %s (%s)\n", torch["version"].get<std::string>().c_str(),
                  torch["device"].get<std::string>().c_str(),
                  torch["python"].get<std::string>().c_str());
    } else {
      std::printf("PyTorch not available: %s\n", torch.value("error", std::string("?")).c_str());
    }
    std::printf("%-44s %12s %12s %8s\n", "workload", "weft", "torch", "ratio");
    for (auto it = ours.begin(); it != ours.end(); ++it) {
      const std::string& key = it.key();
      const char* unit = key.find("GB/s") != std::string::npos  ? "GB/s"
                         : key.find(" us") != std::string::npos ? "us/op"
                                                                : "ms/step";
      std::string peer_key = key;
      for (const char* suffix : {kUntiledRow, kCapturedRow}) {
        if (key.ends_with(suffix)) peer_key = key.substr(0, key.size() - std::strlen(suffix));
      }
      PrintRow(key.c_str(), it.value().get<double>(),
               torch.value("results", nlohmann::json::object()), peer_key.c_str(), unit);
    }
    for (const auto& row : gpt2_rows) {  // tokens per second, against eager and compiled
      const char* variant = row.first;
      const std::string ours_key = gpt2_key + variant;
      if (!ours.contains(ours_key)) continue;
      const nlohmann::json results = torch.value("results", nlohmann::json::object());
      const double tokens = 1024.0 * gpt2 * 1e3;
      std::printf("GPT-2 124M training, batch %d x 1024, %s: weft %.0f tokens/s", gpt2, variant,
                  tokens / ours[ours_key].get<double>());
      for (const char* mode : {"", " compile"}) {
        const std::string key = ours_key + mode;
        if (results.contains(key)) {
          std::printf("; PyTorch%s %.0f tokens/s (weft %.2fx)", *mode ? " torch.compile" : " eager",
                      tokens / results[key].get<double>(),
                      results[key].get<double>() / ours[ours_key].get<double>());
        }
      }
      std::printf("\n");
      if (results.contains(ours_key + " compile error"))
        std::printf("torch.compile: %s\n",
                    results[ours_key + " compile error"].get<std::string>().c_str());
    }
    if (relu)
      std::printf("weft relu reaches %.1f%% of weft's device-to-device copy bandwidth\n",
                  100 * bw.relu_gbs / bw.copy_gbs);
    for (const std::string key : {ln_key, ln_key + kCapturedRow}) {
      if (!ours.contains(key) || bw.copy_gbs <= 0) continue;
      const double gbs = 8192.0 * 768 * 10 / ours[key].get<double>() / 1e6;  // 10 bytes an element
      std::printf(
          "LayerNorm (8192, 768) bfloat16 fwd+bwd%s: weft moves %.0f GB/s, %.1f%% of the "
          "device copy's %.0f GB/s\n",
          key == ln_key ? "" : kCapturedRow, gbs, 100 * gbs / bw.copy_gbs, bw.copy_gbs);
    }
    std::printf(
        "floors: the same tiny kernel launched directly on one stream %.2f us (%.2f us on a "
        "non-blocking "
        "stream; %.2f us through the driver API); an empty GPU op through the engine %.2f us\n",
        raw_launch, raw_nonblocking, driver_launch, empty_op);
    if (fusion) FusionRows(reps, bw.copy_gbs, torch);
    weft::engine::Engine::Get()->Shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
