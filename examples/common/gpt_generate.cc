#include "examples/common/gpt_generate.h"

#include <algorithm>
#include <limits>

#include "examples/common/text.h"

namespace examples {

using weft::NDArray;
using weft::Shape;

std::vector<float> StepMask(int length, int start, int context) {
  std::vector<float> mask(static_cast<size_t>(length) * context,
                          -std::numeric_limits<float>::infinity());
  for (int i = 0; i < length; ++i)
    std::fill_n(mask.begin() + static_cast<size_t>(i) * context, start + i + 1, 0.0f);
  return mask;
}

GptGenerator::GptGenerator(const GptConfig& config, const weft::Symbol& step,
                           const std::map<std::string, NDArray>& params, weft::Device device,
                           int batch)
    : config_(config), step_(step), device_(device), batch_(batch) {
  const Shape cache{batch, config.heads, config.context, config.width / config.heads};
  for (const std::string& name : step.ListArguments()) {
    if (name == "data" || name == "positions" || name == "mask") continue;
    if (name.size() > 6 && name.compare(name.size() - 6, 6, "_cache") == 0) {
      // Zeros, not garbage: a masked key's weight is 0, and 0 times a NaN would still be NaN.
      (args_[name] = NDArray(cache, device)).Fill(0);
      continue;
    }
    const auto it = params.find(name);
    if (it == params.end()) WEFT_THROW("GPT generation: no parameter '" << name << "'");
    args_[name] = it->second.Copy(device);
  }
}

GptGenerator::~GptGenerator() = default;

weft::Executor& GptGenerator::ExecutorFor(int length) {
  std::unique_ptr<weft::Executor>& exec = executors_[length];
  if (exec == nullptr) {
    std::map<std::string, NDArray> args = args_;  // the same parameter and cache arrays
    args["data"] = NDArray(Shape{batch_, length}, device_);
    args["positions"] = NDArray(Shape{length}, device_);
    args["mask"] = NDArray(Shape{length, config_.context}, device_);
    exec = weft::Executor::Bind(step_, device_, args);
  }
  return *exec;
}

std::vector<float> GptGenerator::Feed(const std::vector<float>& tokens, int start) {
  const int length = static_cast<int>(tokens.size()) / batch_;
  if (length < 1 || start < 0 || start + length > config_.context ||
      tokens.size() != static_cast<size_t>(batch_) * length) {
    WEFT_THROW("GPT generation: expected batch " << batch_ << " times L tokens with L >= 1 at "
                                                 << "start >= 0, start + L <= context "
                                                 << config_.context << "; found " << tokens.size()
                                                 << " tokens at start " << start);
  }
  weft::Executor& exec = ExecutorFor(length);
  const auto set = [&](const char* name, const std::vector<float>& values) {
    const NDArray& arg = exec.args().at(name);
    NDArray::FromVector(values, arg.shape()).CopyTo(arg);
  };
  set("data", tokens);
  set("positions", Positions(length, start));
  set("mask", StepMask(length, start, config_.context));
  exec.Forward(/*is_train=*/false);
  return exec.outputs()[0].ToVector<float>();
}

std::vector<int> GptGenerator::Continue(const std::vector<float>& prompt, int n,
                                        const SampleOptions& options, std::mt19937_64& rng) {
  if (batch_ != 1 || prompt.empty())
    WEFT_THROW("GPT generation: Continue needs batch 1 and a prompt; found batch " << batch_);
  const int context = config_.context, keep = std::max(1, context / 2), vocab = config_.vocab;
  std::vector<float> ids(prompt.end() - std::min<size_t>(prompt.size(), context), prompt.end());
  std::vector<float> logits = Feed(ids, 0);
  int position = static_cast<int>(ids.size());  // positions cached
  std::vector<int> out;
  while (static_cast<int>(out.size()) < n) {
    const float* last = logits.data() + logits.size() - vocab;
    const int next = SampleNext(last, vocab, options.temperature, options.top_k, rng);
    out.push_back(next);
    ids.push_back(static_cast<float>(next));
    if (static_cast<int>(out.size()) == n) break;
    if (position == context) {  // the window is full: its last `keep` characters from 0
      logits = Feed(std::vector<float>(ids.end() - keep, ids.end()), 0);
      position = keep;
    } else {
      logits = Feed({static_cast<float>(next)}, position++);
    }
  }
  return out;
}

}  // namespace examples
