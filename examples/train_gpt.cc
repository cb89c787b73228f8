// train_gpt: a character-level GPT (examples/common/gpt.h: token and position embeddings,
// pre-LayerNorm blocks of causal self-attention and a GELU MLP, a final LayerNorm, the output
// projection tied to the token embedding) on real English text: the fortune cookie files of
// Debian's `fortunes` package (apt-get install fortunes), or any text file or folder of them.
//
// The vocabulary is the text's distinct bytes; the first 90% of the text trains, the last 10%
// validates. Each step takes batch_size random windows of context + 1 characters (the input and,
// one position on, the labels) and minimizes the mean cross-entropy per character with AdamW
// (betas 0.9, 0.95, weight decay on the matrices only), a linear warm-up then a cosine rate, and
// gradients clipped to global norm --clip. Each epoch (--steps steps) ends with the validation
// loss in nats and bits per character; then the model is saved (safetensors and the logits'
// symbol as JSON) and a sample is generated from --prompt with --temperature and --top_k, with a
// cache of the keys and values (examples/common/gpt_generate.h): a step per new character, not a
// pass over the whole window; embed_infer --model=gpt continues prompts with the saved model.
//
//   bazel run -c opt //examples:train_gpt -- [--data=/usr/share/games/fortunes] [--epochs=5]
//   [--steps=100] [--layers=4] [--heads=4] [--width=128] [--context=64] [--prompt="The "]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "examples/common/gpt.h"
#include "examples/common/gpt_generate.h"
#include "examples/common/profile.h"
#include "examples/common/progress.h"
#include "examples/common/text.h"
#include "examples/common/train.h"

namespace {

using examples::CharText;
using examples::Windows;
using weft::NDArray;
using weft::Shape;

struct GptFlags {
  examples::GptConfig net{.layers = 4, .heads = 4, .width = 128};
  int steps = 100;  // per epoch
  int warmup = 50;
  double clip = 1.0;
  int val_batches = 8;
  double temperature = 0.8;
  int top_k = 20;
  std::string prompt = "The ";
  int sample_chars = 300;
};

void AddGptFlags(examples::Flags& flags, const GptFlags& d) {
  flags.AddInt("layers", d.net.layers, "decoder blocks");
  flags.AddInt("heads", d.net.heads, "attention heads (width must divide by it)");
  flags.AddInt("width", d.net.width, "the residual stream's width (the MLP's is 4x)");
  flags.AddInt("context", d.net.context, "characters the model sees (the window's length)");
  flags.AddFloat("dropout", d.net.dropout, "dropout after the embeddings and on each residual");
  flags.AddInt("steps", d.steps, "training steps per epoch (each epoch ends with validation)");
  flags.AddInt("warmup", d.warmup, "steps of linear warm-up before the cosine decay");
  flags.AddFloat("clip", d.clip, "clip the gradients to this global norm (0: no clipping)");
  flags.AddInt("val_batches", d.val_batches, "validation batches, spread over the held-out text");
  flags.AddFloat("temperature", d.temperature, "sampling temperature (0: the likeliest)");
  flags.AddInt("top_k", d.top_k, "sample among the k likeliest characters (0: all)");
  flags.AddString("prompt", d.prompt, "the text the sample continues");
  flags.AddInt("sample_chars", d.sample_chars, "characters to generate at the end");
}

GptFlags ReadGptFlags(const examples::Flags& flags) {
  GptFlags g;
  g.net.layers = flags.GetInt("layers");
  g.net.heads = flags.GetInt("heads");
  g.net.width = flags.GetInt("width");
  g.net.context = flags.GetInt("context");
  g.net.dropout = flags.GetFloat("dropout");
  g.steps = flags.GetInt("steps");
  g.warmup = flags.GetInt("warmup");
  g.clip = flags.GetFloat("clip");
  g.val_batches = flags.GetInt("val_batches");
  g.temperature = flags.GetFloat("temperature");
  g.top_k = flags.GetInt("top_k");
  g.prompt = flags.GetString("prompt");
  g.sample_chars = flags.GetInt("sample_chars");
  if (g.steps < 1 || g.warmup < 0 || g.clip < 0 || g.val_batches < 1 || g.sample_chars < 0 ||
      g.temperature < 0) {
    WEFT_THROW(
        "train_gpt: expected --steps >= 1, --val_batches >= 1 and --warmup, --clip, "
        "--sample_chars, --temperature >= 0");
  }
  return g;
}

// A batch as the trainer's and Predict's inputs: data and label (B, T), positions (T,).
weft::Trainer::ArrayMap Batch(const std::vector<float>& data, const std::vector<float>& label,
                              int batch, int context) {
  const std::vector<float> positions = examples::Positions(context);
  return {{"data", NDArray::FromVector(data, Shape{batch, context})},
          {"label", NDArray::FromVector(label, Shape{batch, context})},
          {"positions", NDArray::FromVector(positions, Shape{context})}};
}

std::unique_ptr<weft::Trainer> MakeTrainer(const examples::Gpt& gpt, const GptFlags& g,
                                           const examples::TrainOptions& o) {
  const double tokens = static_cast<double>(o.batch_size) * g.net.context;
  weft::TrainerOptions options{.device = o.device,
                               .precision = o.precision,
                               .predict = weft::Symbol::Group({gpt.loss, gpt.logits})};
  const int64_t total = int64_t{g.steps} * o.epochs;
  if (o.cosine) {
    options.schedule.decay = weft::LrSchedule::Cosine{
        .steps = std::max<int64_t>(total - g.warmup, 1), .final_lr = o.lr / 10};
  }
  options.schedule.warmup_steps = g.warmup;
  options.clip_global_norm = g.clip;
  options.initialize = [net = g.net](const std::string& name, const NDArray& array) {
    return examples::InitializeGpt(net, name, array);
  };
  return std::make_unique<weft::Trainer>(
      gpt.loss, examples::GptDataShapes(o.batch_size, g.net.context), weft::Zero(),
      *examples::MakeOptimizer(o, 1.0 / tokens), options);
}

double Mean(const NDArray& losses) {
  double sum = 0;
  const std::vector<float> v = losses.ToVector<float>();
  for (float l : v) sum += l;
  return sum / static_cast<double>(v.size());
}

// The mean loss per character over val_batches batches of windows spread evenly over the
// validation text (the same windows every epoch).
double ValidationLoss(weft::Trainer& trainer, const Windows& val, const GptFlags& g, int batch) {
  std::vector<float> data, label;
  double sum = 0;
  for (int b = 0; b < g.val_batches; ++b) {
    val.FillEven(b * batch, batch, g.val_batches * batch, &data, &label);
    sum += Mean(trainer.Predict(Batch(data, label, batch, g.net.context))[0]);
  }
  return sum / g.val_batches;
}

// One epoch of g.steps steps; returns the mean training loss.
double TrainEpoch(weft::Trainer& trainer, Windows& train, const GptFlags& g, int batch,
                  examples::Progress& bar) {
  std::vector<float> data, label;
  double sum = 0;
  for (int s = 0; s < g.steps; ++s) {
    train.Fill(batch, &data, &label);
    trainer.Step(Batch(data, label, batch, g.net.context));
    sum += Mean(trainer.outputs()[0]);
    bar.Step(batch * g.net.context);
  }
  return sum / g.steps;
}

}  // namespace

namespace {

std::map<std::string, NDArray> Parameters(const weft::Trainer& trainer) {
  std::map<std::string, NDArray> params;
  for (const std::string& name : trainer.parameter_names()) params[name] = trainer.parameter(name);
  return params;
}

// Continues g.prompt by g.sample_chars characters with the key-value cache
// (examples/common/gpt_generate.h): one step per character.
std::string Generate(const weft::Trainer& trainer, const CharText& text, const GptFlags& g,
                     weft::Device device, uint64_t seed) {
  std::vector<float> ids = text.Encode(g.prompt);
  if (ids.empty()) ids.push_back(0);
  std::string out;
  for (float id : ids) out.push_back(text.Decode(static_cast<int>(id)));
  examples::GptConfig net = g.net;
  net.vocab = text.vocab();
  examples::GptGenerator generator(net, examples::MakeGptStep(net), Parameters(trainer), device);
  std::mt19937_64 rng(seed);
  const auto start = std::chrono::steady_clock::now();
  for (int id : generator.Continue(ids, g.sample_chars, {g.temperature, g.top_k}, rng))
    out.push_back(text.Decode(id));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("sample (temperature %g, top-k %d; %d characters, %.0f characters/s):\n",
              g.temperature, g.top_k, g.sample_chars, seconds > 0 ? g.sample_chars / seconds : 0);
  return out;
}

// <prefix>.safetensors: the parameters, and as metadata the vocabulary (byte values, by id) and
// the model's shape; <prefix>.json: the logits' symbol (inputs data and positions);
// <prefix>_step.json: the generation step's (examples::MakeGptStep), which embed_infer runs.
void SaveGpt(const weft::Trainer& trainer, const examples::Gpt& gpt, const GptFlags& g,
             const CharText& text, const std::string& prefix) {
  std::string dir;
  if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY")) dir = std::string(ws) + "/";
  const std::map<std::string, NDArray> params = Parameters(trainer);
  std::string vocabulary;
  for (unsigned char c : text.vocabulary())
    vocabulary += (vocabulary.empty() ? "" : ",") + std::to_string(c);
  const std::map<std::string, std::string> meta = {{"vocabulary", vocabulary},
                                                   {"context", std::to_string(g.net.context)},
                                                   {"layers", std::to_string(g.net.layers)},
                                                   {"heads", std::to_string(g.net.heads)},
                                                   {"width", std::to_string(g.net.width)}};
  weft::Save(dir + prefix + ".safetensors", params, meta);
  weft::SaveSymbol(dir + prefix + ".json", gpt.logits);
  examples::GptConfig net = g.net;
  net.vocab = text.vocab();
  weft::SaveSymbol(dir + prefix + "_step.json", examples::MakeGptStep(net));
  std::printf("saved %s%s.safetensors, %s%s.json and %s%s_step.json\n", dir.c_str(), prefix.c_str(),
              dir.c_str(), prefix.c_str(), dir.c_str(), prefix.c_str());
}

void Run(const examples::TrainOptions& o, GptFlags g) {
  weft::SeedRandom(o.seed);
  const CharText text(examples::ReadTextFiles(o.data));
  const int64_t cut = text.size() * 9 / 10;
  Windows train(text.Ids(0, cut), g.net.context, o.seed);
  const Windows val(text.Ids(cut, text.size()), g.net.context, o.seed);
  g.net.vocab = text.vocab();
  const examples::Gpt gpt = examples::MakeGpt(g.net);
  const std::unique_ptr<weft::Trainer> trainer = MakeTrainer(gpt, g, o);
  if (!o.dot.empty()) examples::WriteDot(*trainer, o.dot);
  std::printf(
      "%lld training and %lld validation characters, vocabulary %d; %d layers, %d heads, "
      "width %d, context %d; %zu parameter arrays; %s, lr %g, batch %d, %s\n",
      static_cast<long long>(train.size()), static_cast<long long>(val.size()), text.vocab(),
      g.net.layers, g.net.heads, g.net.width, g.net.context, trainer->parameter_names().size(),
      o.optimizer.c_str(), o.lr, o.batch_size, weft::PrecisionName(o.precision));
  examples::ProfileScope profile(o.profile);
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    examples::Progress bar("epoch " + std::to_string(epoch) + "/" + std::to_string(o.epochs),
                           g.steps, stdout, "tokens");
    const double train_loss = TrainEpoch(*trainer, train, g, o.batch_size, bar);
    const double val_loss = ValidationLoss(*trainer, val, g, o.batch_size);
    char summary[160];
    std::snprintf(summary, sizeof(summary), "loss %.4f  val loss %.4f nats  %.3f bits/char",
                  train_loss, val_loss, val_loss / std::log(2.0));
    bar.Finish(summary);
  }
  profile.Stop();
  if (!o.save_prefix.empty()) SaveGpt(*trainer, gpt, g, text, o.save_prefix);
  std::printf("%s\n", Generate(*trainer, text, g, o.device, o.seed).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    examples::TrainOptions defaults;
    defaults.epochs = 5;
    defaults.batch_size = 32;
    defaults.lr = 5e-3;
    defaults.optimizer = "adamw";
    defaults.wd = 0.1;
    defaults.cosine = true;
    defaults.save_prefix = "gpt";
    defaults.data = "/usr/share/games/fortunes";
    GptFlags g;
    const auto options = examples::ParseTrainFlags(
        "train_gpt",
        "Trains a character-level GPT on text: a file, or a folder of text files (the fortune "
        "cookie files of Debian's fortunes package by default).",
        defaults, argc, argv, [&](examples::Flags& flags) { AddGptFlags(flags, g); },
        [&](const examples::Flags& flags) { g = ReadGptFlags(flags); });
    if (!options) return 0;
    if (options->dist) WEFT_THROW("train_gpt: --dist is not supported yet");
    Run(*options, g);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
