// Trainer: a model's training step bound as one unit. It binds a loss symbol for fixed data shapes
// on a device, initializes the parameters, and appends to the bound graph, after the gradients,
// the optimizer's update of every parameter (sgd_update, sgd_mom_update or adam_update, with the
// optimizer state as graph arguments) and, as an option, the clipping of the gradients by their
// global norm: one Step pushes forward, backward and updates of ONE bound graph, which fusion,
// memory planning and bulk execution see whole (executor/executor.h, GraphExtension). It owns the
// parameters, their gradients, the optimizer state and the step count; Predict and Evaluate bind
// an inference graph over the same parameter arrays.
//
//   Trainer trainer(loss, {{"data", Shape{64, 784}}, {"label", Shape{64}}}, Xavier(),
//                   SGD(/*lr=*/0.1, /*momentum=*/0.9, /*wd=*/0, /*rescale_grad=*/1.0 / 64),
//                   {.schedule = {.decay = LrSchedule::Cosine{.steps = 1000}, .warmup_steps =
//                   100}});
//   for (iter.Reset(); iter.Next();) trainer.Step(iter.Current());   // "data", "label"
//   double accuracy = trainer.Evaluate(test_iter, metric);           // options.predict's output 0
//   trainer.Save("step.safetensors");   // later, in a trainer built the same way: Load, train on
//
// The step as the engine sees it, and as a CUDA graph capture would. From construction on, the
// bound graph's nodes, their attributes and every array they touch (the memory plan's buffers,
// the data arrays, parameters, gradients, optimizer state and the learning rate) never change, so
// every step pushes the same engine ops on the same memory. Step pushes, in order:
//   1. copies of the batch into the bound data arrays (Step() alone skips them);
//   2. when the rate changes, one fill of the learning-rate array: a float64 device scalar that
//      every update reads as its last input (lr_input), holding the schedule's rate for this step
//      with Adam's bias correction folded in (Optimizer::StepLearningRate), computed in double on
//      the host; nothing of the schedule or the step count is an attribute of a node;
//   3. the bound graph's segments, each one engine op: forward, backward, then the clipping and
//      the loss scaler (the norm, the scale and the skip stay on the device: no host read inside a
//      step) and the updates, which run after every other reader of the weights they write.
// A capture records 3 once and replays it; 1 and 2 are copies into fixed addresses before the
// replay. The one per-step value 3 takes by argument is the random-number key of segments with a
// random op (Dropout): a replay must advance it as the pushes do.
//
// Gradient clipping by global norm (TrainerOptions::clip_global_norm = c > 0): with
// norm = rescale_grad * sqrt(sum over every parameter's gradient of sum(grad^2)), every gradient
// is multiplied by min(1, c / (norm + 1e-6)) before its update (which then rescales, clips
// elementwise and decays as the optimizer says). The gradient arrays keep the unclipped values.
// The updates apply that factor themselves (weft/gradient_multiplier.h; with loss scaling it is
// also 1 / scale, and norm is the unscaled gradients'), no pass over the gradients of its own.
//
// Save writes the parameters (by name), the auxiliary states (by name), the optimizer state
// ("<parameter>.<state>": .mom, .mean, .var), the loss scaler's state ("trainer.loss_scale",
// "trainer.loss_scale_clean_steps") and, as metadata, the step count and the update op;
// Load restores them all, so training resumes exactly where it stopped (the global random stream is
// not saved: reseed it for Dropout). Not thread-safe: one thread drives a trainer; its steps run on
// the engine's workers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "distributed/communicator.h"
#include "executor/executor.h"
#include "graph/symbol.h"
#include "passes/mixed_precision.h"
#include "storage/ndarray.h"
#include "weft/data_iter.h"
#include "weft/initializer.h"
#include "weft/lr_schedule.h"
#include "weft/metric.h"
#include "weft/optimizer.h"

namespace weft {

// How a training step computes (TrainerOptions::precision).
enum class Precision {
  kFloat32,  // every op in TrainerOptions::dtype
  // Mixed precision, as PyTorch's autocast and MXNet's AMP: parameters, gradients and optimizer
  // state stay float32 (master weights); the ops passes/mixed_precision.h's policy names compute
  // in bfloat16, reading a bfloat16 copy of each weight they use, which the optimizer's update
  // writes beside the new weight (no pass of its own). bfloat16 needs no loss scaling.
  kBFloat16Mixed,
  // The same in float16, with dynamic loss scaling (TrainerOptions::loss_scaling, on by default):
  // float16 has the range bfloat16 keeps and float32 gradients would lose. GPU only (the CPU has
  // no float16 arithmetic here: a weft::Error; use kBFloat16Mixed).
  kFloat16Mixed,
};

// "float32", "bfloat16-mixed", "float16-mixed": the names flags and files use.
const char* PrecisionName(Precision precision);
// The Precision `name` names; a weft::Error naming the three otherwise.
Precision ParsePrecision(const std::string& name);

// Dynamic loss scaling, as PyTorch's GradScaler (its defaults, and a cap): the losses' head
// gradients are the scale times the optimizer's rescale_grad instead of one, so the backward
// computes the gradients of the rescaled loss (the batch's mean, with rescale_grad 1 / batch)
// times the scale, as scaler.scale(loss.mean()).backward() does, and its small float16 gradients
// do not flush to zero; the updates multiply the gradients by 1 / scale (before clipping, which
// sees the unscaled norm). The gradient arrays hold those scaled gradients. One reduction over
// every gradient (their sum of squares, which clipping reads too) checks that they are all finite;
// when one is not, the step's updates write nothing (weights, optimizer state and 16-bit copies
// keep their bits) and the scale is multiplied by backoff_factor; after growth_interval clean steps
// in a row it is multiplied by growth_factor, to at most max_scale. The decision stays on the
// device: no host read in a step, so a captured step replays it. Scale and count are saved and
// loaded with the trainer. A skipped step still counts in steps() and the schedule, Adam's bias
// correction included (PyTorch's optimizer would not count it; the difference fades after the first
// few steps).
struct LossScaling {
  double initial_scale = 65536;  // 2^16
  double growth_factor = 2, backoff_factor = 0.5;
  int growth_interval = 2000;
  double max_scale = 16777216;  // 2^24
};

struct TrainerOptions {
  Device device = Device::Cpu();
  // The parameters', gradients' and optimizer state's dtype: float32, float64 or bfloat16 (the
  // initializer fills a float32 copy, which is cast). Data inputs stay float32: a model in
  // bfloat16 casts them itself. Auxiliary states (BatchNorm's running statistics) take this dtype
  // too, but float32 in a bfloat16 trainer: BatchNorm keeps statistics in float32.
  DType dtype = DType::kFloat32;
  // Mixed precision needs dtype float32. Predict and Evaluate compute in float32.
  Precision precision = Precision::kFloat32;
  // Mixed precision's per-op rows, by op name, over passes/mixed_precision.h's kPrecisionTable.
  std::map<std::string, OpPrecision> precision_overrides;
  // Dynamic loss scaling: empty is on, with these defaults, for kFloat16Mixed and off otherwise;
  // a value turns it on in any precision (float32 included: with the scale a power of two, the
  // steps then equal unscaled ones bit for bit until an overflow).
  std::optional<LossScaling> loss_scaling;
  LrSchedule schedule;          // constant: the optimizer's rate at every step
  double clip_global_norm = 0;  // > 0: clip the gradients to this global norm; 0: no clipping
  // The inference graph of Predict and Evaluate, over the loss's parameters (a classifier's
  // probabilities); a symbol with no outputs (the default): the loss symbol itself.
  Symbol predict;
  // A model's own initialization of some parameters (PyTorch's for an LSTM, say): called for each
  // parameter in name order; a parameter it fills (it returns true) is left alone by the trainer's
  // initializer. Empty: the initializer fills them all.
  std::function<bool(const std::string& name, const NDArray& array)> initialize;
  // Data-parallel training (distributed/world.h; not owned, outlives the trainer): the parameters
  // are broadcast from rank 0 when the trainer is built, and in each step every gradient is
  // averaged over the ranks by an all-reduce pushed right after the backward, which starts as soon
  // as the backward has written its gradients (it overlaps the rest of the backward) and before the
  // updates, which then run as ops of their own rather than inside the bound graph. Gradients
  // are all-reduced in reverse order of the parameters' first use (the order backward makes
  // them), consecutive ones smaller than bucket_bytes packed into one collective. Each rank steps
  // on its own shard of the global batch, with rescale_grad 1 / its batch size; clipping (by the
  // same ops) reads the averaged gradients, so every rank clips by the same scale. Null: this
  // process alone.
  dist::Communicator* communicator = nullptr;
  size_t bucket_bytes = size_t{1} << 20;
};

class Trainer {
 public:
  using ArrayMap = std::map<std::string, NDArray>;

  // Binds `loss`, whose every output is a loss to minimize (head gradient one; stop_gradient
  // outputs get none), for the data inputs `data_shapes` (float32 arrays by name). Arguments an op
  // updates in place are auxiliary states (auxiliary_names()). Every other argument is a
  // parameter: shaped by inference, initialized by `init` in name order, updated by `optimizer`
  // (its settings are copied). Throws weft::Error for a data name that is not an
  // argument of the loss, a loss with no parameter, a parameter whose shape cannot be inferred, an
  // argument named like the trainer's own arrays (".mom", ".mean", ".var", "trainer.lr"), a bad
  // schedule or a clip_global_norm < 0.
  Trainer(const Symbol& loss, const std::map<std::string, Shape>& data_shapes,
          const Initializer& init, const Optimizer& optimizer, const TrainerOptions& options = {});
  ~Trainer();  // waits for the work the trainer pushed
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One training step on `batch`: every data input by name, with its bound shape (a missing,
  // unknown or misshapen one is a weft::Error, thrown before anything is pushed). Returns at once.
  void Step(const ArrayMap& batch);
  // The same with the data inputs "data" and "label" from an iterator's batch (those the loss has);
  // other data inputs keep what they hold (an RNN's initial states, zeroed once).
  void Step(const DataBatch& batch);
  // A step on the data arrays as they are (data(name); a benchmark fills them once).
  void Step();

  // The loss symbol's outputs, written by each step (read them before the next one is pushed).
  const std::vector<NDArray>& outputs() const;
  int64_t steps() const { return steps_; }  // steps pushed (or loaded)
  // The schedule's rate for step `t` (default: the next step), before any bias correction.
  double learning_rate(int64_t t = 0) const;

  // The inference graph (TrainerOptions::predict) run with is_train false on `inputs` (its
  // non-parameter arguments by name; any batch size), after the steps pushed so far. Returns its
  // outputs, valid until the next Predict. Rebinds only when the inputs' shapes change. Throws
  // weft::Error for a missing or unknown input.
  std::vector<NDArray> Predict(const ArrayMap& inputs);
  // One pass of `iter` (reset first) through Predict, with each batch's "data" and "label" (those
  // the graph has); `metric` gets the labels and Predict's output `output`, without the padding
  // of a last batch. Returns metric.Get().
  double Evaluate(DataIter& iter, Metric& metric, size_t output = 0);

  // Arrays by name; each throws weft::Error for an unknown name (saying what the names are).
  const std::vector<std::string>& parameter_names() const { return params_; }
  const NDArray& parameter(const std::string& name) const;
  const NDArray& gradient(const std::string& name) const;  // of the last step, before clipping
  // With a communicator: the gradients as each step all-reduces them, one collective per bucket
  // (last layer first, small ones packed to TrainerOptions::bucket_bytes); empty without one.
  const std::vector<std::vector<NDArray>>& gradient_buckets() const { return grad_buckets_; }
  std::vector<std::string> state_names() const;  // "fc1_weight.mom", ...
  const NDArray& state(const std::string& name) const;
  // A mixed-precision trainer's 16-bit copies of the parameters its step reads in 16 bits
  // ("fc1_weight.bfloat16"), as the last update wrote them (or Load, or the construction).
  std::vector<std::string> copy_names() const;
  const NDArray& copy(const std::string& name) const;
  // Auxiliary states: arguments an op of the loss updates itself in training (BatchNorm's running
  // mean and variance, "bn1_moving_mean"): no gradient and no optimizer update, initialized by
  // name (moving_mean zeros, moving_var ones), saved and loaded with the parameters, and read by
  // Predict and Evaluate. With a communicator each rank keeps its own (as PyTorch's DDP without
  // SyncBatchNorm).
  std::vector<std::string> auxiliary_names() const;
  const NDArray& auxiliary(const std::string& name) const;
  const NDArray& data(const std::string& name) const;  // a bound data input
  // With loss scaling, the scale the next step runs with (a host read: it waits for the steps
  // pushed); 1 without. With it the gradients (gradient()) are those of the rescaled loss, scaled.
  double loss_scale() const;

  // Throws weft::Error when the file cannot be written (weft/serialization.h), or, for Load, is
  // not a trainer file for this model and optimizer (naming the array or setting that differs);
  // a Load that throws has changed nothing.
  void Save(const std::string& path) const;
  void Load(const std::string& path);

  ExecutorStats stats() const;  // of the bound training step
  // The bound training step as Graphviz DOT (Executor::ToDot: after `after_pass`, or as bound).
  std::string ToDot(const std::string& after_pass = "") const;

 private:
  struct Inference {  // the inference graph, bound for inputs of these shapes and dtypes
    std::map<std::string, std::pair<Shape, DType>> inputs;
    std::unique_ptr<Executor> exec;
  };

  void AllocateArrays(const std::map<std::string, Shape>& shapes,
                      const std::map<std::string, Shape>& data_shapes,
                      const std::vector<std::string>& auxiliary, const Initializer& init);
  // The model's hook or `init` fills `array`, the parameter or auxiliary state `name`.
  void InitializeArray(const std::string& name, const NDArray& array, const Initializer& init);
  void BindStep(const Symbol& loss, const std::map<std::string, Shape>& data_shapes,
                const Initializer& init);
  std::unique_ptr<Executor> BindInference(const ArrayMap& inputs) const;
  ArrayMap SavedArrays() const;
  std::vector<std::string> InferenceInputs()
      const;  // the inference graph's non-parameter arguments
  // Mixed precision: the policy, the parameters the step reads in 16 bits (their copies_), and
  // the copies written from the parameters (at construction and Load).
  std::optional<DType> LowDType() const;  // bfloat16 or float16; none for Precision::kFloat32
  std::optional<PrecisionPolicy> Policy() const;
  void AllocateCopies(const Symbol& loss);
  void RefreshCopies();
  const NDArray* CopyOf(const std::string& param) const;  // null: none
  // Loss scaling: amp_update_scale's attributes (null: off) and the state's arrays.
  std::optional<LossScaling> Scaling() const;
  void AllocateScaler();
  // The rescale_grad the updates apply: the optimizer's, or 1 with loss scaling, whose head
  // gradients carry it.
  double UpdateRescale() const;
  const NDArray& Find(const ArrayMap& arrays, const std::string& what,
                      const std::string& name) const;
  // Every array of `batch` names a data input and has its shape; `complete`: every data input is
  // there.
  void CheckBatch(const ArrayMap& batch, bool complete) const;
  ArrayMap ArraysOf(const DataBatch& batch, const std::vector<std::string>& inputs) const;
  // With a communicator: the gradient buckets (in all-reduce order), the start's broadcast, and
  // each step's all-reduces and updates.
  void PlanGradientBuckets(const Symbol& loss);
  void BroadcastParameters() const;
  void AllReduceAndUpdate() const;

  std::unique_ptr<Optimizer> optimizer_;
  std::string update_op_;            // the op each parameter's update runs (it reads lr_)
  std::vector<std::string> states_;  // the update op's state inputs ("mom"; "mean", "var")
  TrainerOptions options_;
  std::vector<std::string> params_;  // in name order
  std::vector<std::string> inputs_;  // the data inputs, in name order
  ArrayMap data_, params_arrays_, grads_, state_arrays_;
  ArrayMap aux_arrays_;  // auxiliary states: arguments an op of the loss updates (BatchNorm's)
  ArrayMap copies_;      // mixed precision: "<parameter>.<dtype>", the step's 16-bit weights
  // Loss scaling: the scale and the count of clean steps (float32 (1,) arrays, by their names),
  // and amp_update_scale's attributes; empty without.
  ArrayMap scaler_;
  AttrMap scaler_attrs_;
  std::vector<std::string> host_inputs_;  // data inputs read on the host: CPU arrays on any device
  NDArray lr_;                      // float64: the rates every update reads (Optimizer::StepRates)
  std::vector<double> lr_written_;  // what lr_ holds (empty: not written yet)
  int64_t steps_ = 0;
  std::unique_ptr<Executor> exec_;                  // the training step
  std::unique_ptr<Inference> infer_;                // bound on the first Predict
  std::vector<std::vector<NDArray>> grad_buckets_;  // with a communicator
  // Each parameter's update attributes (ForParameter: its weight decay), lr_input; parsed for the
  // updates a communicator's step pushes.
  std::map<std::string, AttrMap> param_updates_;
  std::map<std::string, Attrs> param_update_attrs_;
};

}  // namespace weft
