// Generation from a GPT (examples/common/gpt.h) with a key-value cache: the step graph
// (MakeGptStep) bound once per chunk length, with the parameters copied to the device once and
// one key cache and one value cache per layer that every step updates in place. n new characters
// cost n one-position steps, not n passes over the whole window.
//
//   examples::GptGenerator gen(config, examples::MakeGptStep(config), params, Device::Cpu());
//   std::mt19937_64 rng(seed);
//   std::vector<int> ids = gen.Continue(text.Encode("The "), 300, {.temperature = 0.8}, rng);
//
// When the window is full (context positions cached) the next step would have no position left:
// the generator then runs its last context / 2 characters again from position 0, one chunk that
// refills the caches, and goes on one position a step. Positions are those the model was trained
// on (0 .. context - 1) and the model sees at least context / 2 characters each step.
#pragma once

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "examples/common/gpt.h"
#include "weft/weft.h"

namespace examples {

struct SampleOptions {
  double temperature = 0.8;  // 0: the likeliest character
  int top_k = 20;            // 0: all
};

// The additive mask of a step of `length` positions from `start` over `context` keys:
// (length, context) with 0 where key j <= start + i, -inf elsewhere.
std::vector<float> StepMask(int length, int start, int context);

class GptGenerator {
 public:
  // step: MakeGptStep(config), or that symbol loaded from JSON (train_gpt saves it). params:
  // every parameter of the model by name (a trainer's, or weft::Load's; others are ignored),
  // copied to `device` once. batch: sequences per step (Continue takes 1). Throws weft::Error
  // naming a missing parameter or a shape that does not match.
  GptGenerator(const GptConfig& config, const weft::Symbol& step,
               const std::map<std::string, weft::NDArray>& params, weft::Device device,
               int batch = 1);
  ~GptGenerator();

  // The logits (batch * L, vocab), row b * L + i for position start + i, of tokens (batch, L)
  // row-major at positions [start, start + L), start + L <= context, with the caches holding
  // what earlier calls wrote at positions < start (start 0: nothing is read). Writes positions
  // [start, start + L) of the caches. Binds the step for L the first time L is used.
  std::vector<float> Feed(const std::vector<float>& tokens, int start);

  // `prompt` (ids, at least one; its last context ones are used) continued by n ids, each drawn
  // by SampleNext from the last position's logits: one Feed of the prompt, then a one-position
  // Feed per id (and a refill where the window is full, see above). Needs batch 1.
  std::vector<int> Continue(const std::vector<float>& prompt, int n, const SampleOptions& options,
                            std::mt19937_64& rng);

 private:
  weft::Executor& ExecutorFor(int length);

  GptConfig config_;
  weft::Symbol step_;
  weft::Device device_;
  int batch_;
  std::map<std::string, weft::NDArray> args_;  // the parameters and caches, on device_
  std::map<int, std::unique_ptr<weft::Executor>> executors_;  // by chunk length
};

}  // namespace examples
