// The trainer's inference (Predict, Evaluate) and checkpoints (Save, Load); its step: trainer.cc.
#include <algorithm>
#include <charconv>
#include <utility>

#include "core/error.h"
#include "core/text.h"
#include "weft/serialization.h"
#include "weft/trainer.h"

namespace weft {
namespace {

// Metadata keys of a saved trainer.
const char kStepsKey[] = "weft.trainer.steps";
const char kUpdateKey[] = "weft.trainer.update";

// The shape and dtype of each input, by name.
std::map<std::string, std::pair<Shape, DType>> Signature(
    const std::map<std::string, NDArray>& inputs) {
  std::map<std::string, std::pair<Shape, DType>> signature;
  for (const auto& [name, array] : inputs) {
    WEFT_CHECK(!array.is_none()) << "Trainer::Predict: input '" << Abbreviate(name)
                                 << "' is a null array";
    signature[name] = {array.shape(), array.dtype()};
  }
  return signature;
}

// The step count of a trainer file, which must have been saved with update op `op`.
int64_t SavedSteps(const std::string& path, const std::map<std::string, std::string>& meta,
                   const std::string& op) {
  auto steps = meta.find(kStepsKey), update = meta.find(kUpdateKey);
  if (steps == meta.end() || update == meta.end()) {
    WEFT_THROW("Trainer::Load: '" << path << "' is not a trainer's file: its metadata has no '"
                                  << kStepsKey << "' and '" << kUpdateKey
                                  << "' (a file of parameters only?)");
  }
  if (update->second != op) {
    WEFT_THROW("Trainer::Load: '" << path << "' holds the state of " << Abbreviate(update->second)
                                  << "; this trainer runs " << op);
  }
  int64_t t = -1;
  const std::string& text = steps->second;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), t);
  if (ec != std::errc() || end != text.data() + text.size() || t < 0) {
    WEFT_THROW("Trainer::Load: '" << path << "': metadata '" << kStepsKey
                                  << "': expected a step count >= 0, found '" << Abbreviate(text)
                                  << "'");
  }
  return t;
}

}  // namespace

std::vector<NDArray> Trainer::Predict(const ArrayMap& inputs) {
  auto signature = Signature(inputs);
  if (infer_ == nullptr || infer_->inputs != signature) {
    infer_.reset();  // its arrays go before the new binding allocates
    infer_ = std::make_unique<Inference>(Inference{std::move(signature), BindInference(inputs)});
  }
  for (const auto& [name, array] : inputs) array.CopyTo(infer_->exec->args().at(name));
  infer_->exec->Forward(/*is_train=*/false);
  return infer_->exec->outputs();
}

// The inference symbol bound on the trainer's parameter arrays and new arrays like `inputs`.
std::unique_ptr<Executor> Trainer::BindInference(const ArrayMap& inputs) const {
  ArrayMap args;
  const std::vector<std::string> needed = InferenceInputs(),
                                 host = Executor::HostArguments(options_.predict);
  for (const auto& [name, array] : inputs) {
    if (std::find(needed.begin(), needed.end(), name) == needed.end()) {
      WEFT_THROW("Trainer::Predict: '" << Abbreviate(name)
                                       << "' is not an input of the inference graph; its inputs "
                                       << "are " << QuotedList(needed) << DidYouMean(name, needed));
    }
    const bool on_host = std::find(host.begin(), host.end(), name) != host.end();
    args[name] = NDArray(array.shape(), on_host ? Device::Cpu() : options_.device, array.dtype());
  }
  for (const std::string& name : needed) {
    if (inputs.count(name) == 0) {
      WEFT_THROW("Trainer::Predict: no input '" << Abbreviate(name)
                                                << "'; the inference graph's inputs are "
                                                << QuotedList(needed));
    }
  }
  for (const std::string& name : options_.predict.ListArguments()) {
    if (params_arrays_.count(name) != 0) args[name] = params_arrays_.at(name);
    if (aux_arrays_.count(name) != 0) args[name] = aux_arrays_.at(name);
  }
  return Executor::Bind(options_.predict, options_.device, args);
}

std::vector<std::string> Trainer::InferenceInputs() const {
  std::vector<std::string> inputs;
  for (const std::string& name : options_.predict.ListArguments()) {
    if (params_arrays_.count(name) == 0 && aux_arrays_.count(name) == 0) inputs.push_back(name);
  }
  return inputs;
}

double Trainer::Evaluate(DataIter& iter, Metric& metric, size_t output) {
  const std::vector<std::string> inputs = InferenceInputs();
  for (iter.Reset(); iter.Next();) {
    const DataBatch& batch = iter.Current();
    WEFT_CHECK(!batch.label.is_none())
        << "Trainer::Evaluate: the iterator's batches have no labels";
    const std::vector<NDArray> out = Predict(ArraysOf(batch, inputs));
    WEFT_CHECK_LT(output, out.size())
        << "Trainer::Evaluate: the inference graph has " << out.size() << " output(s)";
    const int64_t n = batch.data.shape()[0] - batch.pad;
    metric.Update(batch.label.Slice(0, n), out[output].Slice(0, n));
  }
  return metric.Get();
}

// Everything Save writes and Load restores: parameters, auxiliary and optimizer states, the loss
// scaler's.
Trainer::ArrayMap Trainer::SavedArrays() const {
  ArrayMap arrays = params_arrays_;
  arrays.insert(aux_arrays_.begin(), aux_arrays_.end());
  arrays.insert(state_arrays_.begin(), state_arrays_.end());
  arrays.insert(scaler_.begin(), scaler_.end());
  return arrays;
}

void Trainer::Save(const std::string& path) const {
  const ArrayMap arrays = SavedArrays();
  weft::Save(path, arrays, {{kStepsKey, std::to_string(steps_)}, {kUpdateKey, update_op_}});
}

void Trainer::Load(const std::string& path) {
  std::map<std::string, std::string> meta;
  const ArrayMap file = weft::Load(path, &meta);
  const int64_t steps = SavedSteps(path, meta, update_op_);
  const ArrayMap targets = SavedArrays();
  for (const auto& [name, array] : file) {
    if (targets.count(name) == 0) {
      WEFT_THROW("Trainer::Load: '"
                 << path << "' holds '" << Abbreviate(name)
                 << "', which is not a parameter, auxiliary or optimizer state of this trainer");
    }
    const NDArray& target = targets.at(name);
    if (array.shape() != target.shape() || array.dtype() != target.dtype()) {
      WEFT_THROW("Trainer::Load: '" << path << "': '" << Abbreviate(name) << "' is "
                                    << array.shape() << " " << array.dtype() << ", expected "
                                    << target.shape() << " " << target.dtype());
    }
  }
  for (const auto& [name, target] : targets) {
    if (file.count(name) == 0)
      WEFT_THROW("Trainer::Load: '" << path << "' has no '" << Abbreviate(name) << "'");
  }
  for (const auto& [name, array] : file) array.CopyTo(targets.at(name));
  RefreshCopies();  // mixed precision: the 16-bit weights of the loaded ones
  steps_ = steps;
}

}  // namespace weft
