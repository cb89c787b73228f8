// train_gpt's GPT against PyTorch on the CPU, in the same run, at the same thread count:
//   - a training step of its default model (4 layers, 4 heads, width 128, context 64, vocabulary
//     96, batch 32): weft::Trainer with AdamW (betas 0.9, 0.95, weight decay 0.1 on the matrices
//     only), gradients clipped to global norm 1, against torch.optim.AdamW on the same model built
//     by tests/gpt_torch_cases.py (the oracle of ops_gpt_test);
//   - the same step in bfloat16-mixed precision (TrainerOptions::precision: float32 master weights,
//     the matrix products and attention in bfloat16) against the same PyTorch step under
//     torch.autocast("cpu", dtype=torch.bfloat16) (issue 41);
//   - generation of --chars characters from a 4-character prompt as train_gpt generates them,
//     the likeliest next character each time: with the key-value cache (GptGenerator: one
//     one-position step per character, the last half window run again from position 0 when the
//     window is full), against PyTorch's past-keys-and-values loop doing the same under
//     torch.no_grad;
//   - causal attention alone, forward and backward (B 8, H 8, T 256, D 64, float32): weft's
//     Attention op against PyTorch's matmul-softmax-matmul.
// Each figure is the median of rounds. Peak memory: weft's pooled allocator high-water mark above
// what was in use before the row, PyTorch's growth of peak resident memory (a process per row).
//
//   bazel run -c opt //bench:gpt_bench -- --threads=2 --steps=5 --rounds=5 --chars=256
//   (--train=0, --mixed=0, --generate=0, --attention=0 leave a row out)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "bench/peer.h"
#include "bench/round_ms.h"
#include "examples/common/gpt.h"
#include "examples/common/gpt_generate.h"
#include "weft/weft.h"

namespace {

using weft::NDArray;
using weft::Shape;
using weft::Symbol;

struct Row {
  std::string name;
  std::string unit;  // what ms is per
  double ms = 0;
  size_t peak_bytes = 0;
  nlohmann::json torch;  // the peer's answer for this row
};

Row Measure(const std::string& name, const std::string& unit,
            const std::function<std::function<void()>()>& make, int steps, int rounds,
            int warmup = 2) {
  const bench::Measured m = bench::MeasureCpu(make, steps, rounds, warmup, name);
  return {name, unit, m.ms, m.peak_bytes, {}};
}

// Random token ids in [0, vocab) as floats, n of them.
std::vector<float> Tokens(int n, int vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int> id(0, vocab - 1);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(id(rng));
  return v;
}

// A trainer of `gpt` as train_gpt builds it (AdamW, clipping, warm-up then cosine), for batches
// of `batch` windows; Predict gives the loss and the logits.
std::shared_ptr<weft::Trainer> MakeTrainer(const examples::Gpt& gpt, const examples::GptConfig& c,
                                           int batch,
                                           weft::Precision precision = weft::Precision::kFloat32) {
  weft::TrainerOptions options{.precision = precision,
                               .predict = Symbol::Group({gpt.loss, gpt.logits})};
  options.schedule.decay = weft::LrSchedule::Cosine{.steps = 1000, .final_lr = 5e-4};
  options.schedule.warmup_steps = 50;
  options.clip_global_norm = 1.0;
  options.initialize = [c](const std::string& name, const NDArray& array) {
    return examples::InitializeGpt(c, name, array);
  };
  weft::AdamW adamw(5e-3, 0.9, 0.95, 1e-8, 0.1, 1.0 / (batch * c.context));
  adamw.set_decay_filter(weft::DecayMatricesOnly);
  return std::make_shared<weft::Trainer>(gpt.loss, examples::GptDataShapes(batch, c.context),
                                         weft::Zero(), adamw, options);
}

// A training step on one random batch, filled once, in float32 or mixed precision.
std::function<void()> TrainStep(const examples::GptConfig& c, int batch,
                                weft::Precision precision) {
  auto trainer = MakeTrainer(examples::MakeGpt(c), c, batch, precision);
  std::mt19937 rng(0);
  trainer->data("data").CopyFrom(Tokens(batch * c.context, c.vocab, rng));
  trainer->data("label").CopyFrom(Tokens(batch * c.context, c.vocab, rng));
  trainer->data("positions").CopyFrom(examples::Positions(c.context));
  return [trainer] { trainer->Step(); };
}

// `chars` characters from a 4-character prompt, as train_gpt's Generate takes them but choosing
// the likeliest: GptGenerator's cached steps, the model's parameters as the trainer initialized
// them (the step's executors are bound in the first, unmeasured, round).
std::function<void()> Generate(const examples::GptConfig& c, int chars) {
  const auto trainer = MakeTrainer(examples::MakeGpt(c), c, 1);
  std::map<std::string, NDArray> params;
  for (const std::string& name : trainer->parameter_names())
    params[name] = trainer->parameter(name);
  auto generator = std::make_shared<examples::GptGenerator>(c, examples::MakeGptStep(c), params,
                                                            weft::Device::Cpu());
  return [generator, chars] {
    std::mt19937_64 rng(0);
    generator->Continue({1, 2, 3, 4}, chars, {.temperature = 0}, rng);
  };
}

// Causal attention on q, k, v (b, h, t, d): a forward and a backward from head gradients of ones.
std::function<void()> AttentionStep(int b, int h, int t, int d) {
  const Symbol y =
      Symbol::Op("Attention", {Symbol::Variable("q"), Symbol::Variable("k"), Symbol::Variable("v")},
                 {{"causal", "true"}}, "attn");
  weft::Executor::ArrayMap args, grads;
  std::map<std::string, weft::GradReq> reqs;
  for (const char* name : {"q", "k", "v"}) {
    args[name] = NDArray(Shape{b, h, t, d});
    args[name].FillNormal(0, 1);
    grads[name] = NDArray(Shape{b, h, t, d});
    reqs[name] = weft::GradReq::kWrite;
  }
  std::shared_ptr<weft::Executor> exec =
      weft::Executor::Bind(y, weft::Device::Cpu(), args, grads, reqs);
  return [exec] {
    exec->Forward(/*is_train=*/true);
    exec->Backward();
  };
}

}  // namespace

namespace {

void Print(const std::vector<Row>& rows) {
  std::printf("%-28s %-14s %10s %10s %11s %9s %9s\n", "row", "ms per", "weft ms", "torch ms",
              "weft/torch", "weft MB", "torch MB");
  for (const Row& w : rows) {
    std::printf("%-28s %-14s %10.2f ", w.name.c_str(), w.unit.c_str(), w.ms);
    if (!w.torch.value("available", false)) {
      std::printf("%10s %11s %9.1f %9s  (%s)\n", "n/a", "", w.peak_bytes / 1048576.0, "",
                  w.torch.value("error", std::string("?")).c_str());
      continue;
    }
    const double tms = w.torch["ms"].get<double>();
    std::printf("%10.2f %11.2f %9.1f %9.1f\n", tms, w.ms / tms, w.peak_bytes / 1048576.0,
                w.torch.value("peak_bytes", 0.0) / 1048576.0);
  }
}

std::string Args(const std::vector<int>& values) {
  std::string s;
  for (int v : values) s += " " + std::to_string(v);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::IntFlag(argc, argv, "threads", 2);
  const int steps = bench::IntFlag(argc, argv, "steps", 5);
  const int rounds = bench::IntFlag(argc, argv, "rounds", 5);
  const int chars = bench::IntFlag(argc, argv, "chars", 256);
  const int batch = 32;
  const int b = 8, h = 8, t = 256, d = 64;
  setenv("WEFT_CPU_WORKERS", "1", 0);  // one worker whose ops use `threads` threads, like PyTorch
  setenv("WEFT_CPU_OP_THREADS", std::to_string(threads).c_str(), 1);
  bench::ChdirToWorkspace();
  const examples::GptConfig c{.vocab = 96, .context = 64, .layers = 4, .heads = 4, .width = 128};
  const std::vector<int> sizes = {c.vocab, c.context, c.layers, c.heads, c.width};
  const std::string peer = "bench/torch_gpt_peer.py", th = std::to_string(threads);
  std::vector<Row> rows;
  // The training rows: float32 (--train), bfloat16-mixed (--mixed; the peer under autocast).
  const std::tuple<const char*, const char*, weft::Precision> train_rows[] = {
      {"train", "gpt train step b32", weft::Precision::kFloat32},
      {"mixed", "gpt train step b32 bf16-mixed", weft::Precision::kBFloat16Mixed}};
  for (const auto& [flag, name, precision] : train_rows) {
    if (!bench::IntFlag(argc, argv, flag, 1)) continue;
    rows.push_back(Measure(
        name, "step", [&] { return TrainStep(c, batch, precision); }, steps, rounds));
    const int mixed = precision == weft::Precision::kFloat32 ? 0 : 1;
    rows.back().torch =
        bench::RunPeer(peer, th + " train" + Args(sizes) + Args({batch, steps, rounds, mixed}));
  }
  if (bench::IntFlag(argc, argv, "generate", 1)) {
    rows.push_back(Measure(
        "gpt generate " + std::to_string(chars) + " chars", "character",
        [&] { return Generate(c, chars); }, 1, rounds, 1));
    rows.back().ms /= chars;
    rows.back().torch =
        bench::RunPeer(peer, th + " generate" + Args(sizes) + Args({chars, rounds}));
  }
  if (bench::IntFlag(argc, argv, "attention", 1)) {
    rows.push_back(Measure(
        "causal attention fwd+bwd", "fwd+bwd", [&] { return AttentionStep(b, h, t, d); }, steps,
        rounds));
    rows.back().torch = bench::RunPeer(peer, th + " attention" + Args({b, h, t, d, steps, rounds}));
  }
  if (rows.empty()) return 0;
  std::printf(
      "train_gpt's GPT on the CPU, %d thread(s): %d layers, %d heads, width %d, context %d, "
      "vocabulary %d; training %d rounds of %d steps, generation %d rounds; attention B %d, H %d, "
      "T %d, D %d\n",
      threads, c.layers, c.heads, c.width, c.context, c.vocab, rounds, steps, rounds, b, h, t, d);
  const nlohmann::json& hello = rows.front().torch;
  if (hello.value("available", false)) {
    std::printf("PyTorch %s, %d thread(s)\n", hello["version"].get<std::string>().c_str(),
                hello["threads"].get<int>());
  }
  Print(rows);
  weft::engine::Engine::Get()->Shutdown();
  return 0;
}
