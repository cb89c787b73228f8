#include "weft/trainer.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "core/text.h"
#include "graph/rewrite.h"
#include "passes/infer.h"
#include "weft/gradient_multiplier.h"
#include "weft/imperative.h"

namespace weft {
namespace {

// The trainer's own argument: the learning rate every update reads (float64, shape (1,)); the loss
// scaler's are in gradient_multiplier.h.
const char kLrName[] = "trainer.lr";
using internal::kCleanStepsName;
using internal::kLossScaleName;

std::vector<std::string> Keys(const std::map<std::string, NDArray>& arrays) {
  std::vector<std::string> keys;
  for (const auto& [name, array] : arrays) keys.push_back(name);
  return keys;
}

// Appends nodes to the graph after its gradient pass. Every node it adds is a backward node, run
// by Backward after the gradients: its forward node is the parameter variable it serves.
class Appender {
 public:
  explicit Appender(const Graph& g) : b_(g.ToBuilder()) {
    for (uint32_t n : g.ArgumentNodes()) vars_[g.node(n).name] = n;
  }
  NodeEntry Variable(const std::string& name) {
    Node v;
    v.name = name;
    return Push(std::move(v));
  }
  NodeEntry Op(const std::string& op, const AttrMap& attrs, std::vector<NodeEntry> inputs,
               const std::string& name, const std::string& param) {
    Node node;
    node.op = &GetOp(op);
    node.name = name;
    node.attrs = ParseAttrs(*node.op, attrs);
    node.inputs = std::move(inputs);
    node.forward_node = Param(param).node;
    return Push(std::move(node));
  }
  NodeEntry Param(const std::string& name) const { return {vars_.at(name), 0}; }
  GraphBuilder& builder() { return b_; }

  // Mixed precision: each forward Cast of a parameter of `copies` (parameter -> its copy's name)
  // to `dtype` becomes the variable of its copy, its readers unchanged: the step reads the copy
  // the last update wrote instead of casting the weight again. A parameter the graph does not
  // cast (a bind with the mixed_precision pass switched off) gets the variable all the same.
  void ReadCopies(const Graph& g, const std::map<std::string, std::string>& copies, DType dtype) {
    std::set<std::string> found;
    for (uint32_t n = 0; n < g.nodes().size(); ++n) {
      const Node* param = CastArgument(g, n, dtype);
      auto copy = param == nullptr ? copies.end() : copies.find(param->name);
      if (copy == copies.end()) continue;
      b_.nodes[n] = Node{};
      b_.nodes[n].name = copy->second;
      found.insert(copy->first);
    }
    for (const auto& [param, copy] : copies) {
      if (found.count(param) == 0) Variable(copy);
    }
  }

 private:
  NodeEntry Push(Node node) {
    b_.nodes.push_back(std::move(node));
    return {static_cast<uint32_t>(b_.nodes.size() - 1), 0};
  }
  GraphBuilder b_;
  std::map<std::string, uint32_t> vars_;  // argument name -> its variable node
};

// Loss scaling: each head gradient (the executor's ones) is multiplied by the argument `scale`
// times `rescale` (the optimizer's rescale_grad, which the updates then leave out) before the
// backward reads it, so every gradient comes out as the gradient of the rescaled loss (the batch's
// mean, usually) times the scale: what PyTorch's scaler.scale(loss).backward() makes.
Graph ScaleHeadGradients(const Graph& g, const std::string& scale, double rescale) {
  std::map<uint32_t, uint32_t> output_of;  // head gradient node -> its forward output
  for (size_t i = 0; i < g.head_grads().size(); ++i) output_of[g.head_grads()[i]] = i;
  GraphRewrite r(g);
  std::optional<uint32_t> factor;  // scale * rescale
  const auto op = [&](const char* name, const AttrMap& attrs, std::vector<NodeEntry> inputs,
                      const std::string& node_name, uint32_t forward) {
    Node node;
    node.op = &GetOp(name);
    node.name = node_name;
    node.attrs = ParseAttrs(*node.op, attrs);
    node.inputs = std::move(inputs);
    node.forward_node = static_cast<int>(forward);
    return r.Add(std::move(node), {});
  };
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    const uint32_t kept = r.Keep(n);
    auto head = output_of.find(n);
    if (head == output_of.end()) continue;
    const uint32_t forward = g.outputs()[head->second].node;
    if (!factor) {
      Node v;
      v.name = scale;
      const uint32_t s = r.Add(std::move(v), {});
      factor = op("mul_scalar", {{"scalar", FloatAttr(rescale)}}, {{s, 0}}, scale + "_rescaled",
                  forward);
    }
    r.MapEntry({n, 0},
               {op("mul", {}, {{kept, 0}, {*factor, 0}}, g.node(n).name + "_scaled", forward), 0});
  }
  return std::move(r).Finish();
}

// What the trainer appends to the step's graph: the gradients' multiplier (clipping, the loss
// scaler) and one update per parameter. Copied into the executor's GraphExtension (a Reshape
// appends again), so it holds values only.
struct StepUpdates {
  std::string op;
  std::map<std::string, AttrMap> attrs;  // per parameter
  std::vector<std::string> states, params;
  double clip = 0, rescale = 1;  // rescale: the updates' rescale_grad, which clipping reads
  // Loss scaling: amp_update_scale's attributes, and the rescale_grad the head gradients take
  // (the updates' is then 1).
  std::optional<AttrMap> scaler;
  double head_rescale = 1;
  // Mixed precision: parameter -> the name of its copy in `copy_dtype`, which its update writes.
  std::map<std::string, std::string> copies;
  DType copy_dtype = DType::kFloat32;
  DType grad_dtype = DType::kFloat32;  // the gradients' (the parameters')

  Graph Append(const Graph& g, const std::vector<std::string>& grad_args) const;
  // What every step graph gets, with a communicator too: the scaled head gradients and the
  // reads of the 16-bit copies.
  Appender Backward(const Graph& g) const;
  std::optional<NodeEntry> Multiplier(Appender& a,
                                      const std::map<std::string, NodeEntry>& grads) const;
};

Appender StepUpdates::Backward(const Graph& g) const {
  const Graph step = scaler ? ScaleHeadGradients(g, kLossScaleName, head_rescale) : g;
  Appender a(step);
  if (!copies.empty()) a.ReadCopies(step, copies, copy_dtype);
  return a;
}

// The multiplier as nodes of the step's graph (gradient_multiplier.h).
std::optional<NodeEntry> StepUpdates::Multiplier(
    Appender& a, const std::map<std::string, NodeEntry>& grads) const {
  internal::GradientScaling<NodeEntry> s{clip, rescale};
  if (scaler) s = {clip, rescale, &*scaler, a.Param(kLossScaleName), a.Variable(kCleanStepsName)};
  s.grads = grad_dtype;
  return internal::GradientMultiplier(
      grads, s,
      [&a](const char* op, const AttrMap& attrs, std::vector<NodeEntry> inputs,
           const std::string& name,
           const std::string& param) { return a.Op(op, attrs, std::move(inputs), name, param); });
}

// The optimizer's update op as the trainer runs it: reading the rate from lr_ (its last input).
Optimizer::GraphUpdate ReadingTheRate(Optimizer::GraphUpdate update) {
  update.attrs["lr_input"] = "true";
  return update;
}

Graph StepUpdates::Append(const Graph& g, const std::vector<std::string>& grad_args) const {
  Appender a = Backward(g);
  std::map<std::string, NodeEntry> grads;
  for (size_t i = 0; i < grad_args.size(); ++i)
    grads[grad_args[i]] = a.builder().outputs[a.builder().num_forward_outputs + i];
  const std::optional<NodeEntry> multiplier = Multiplier(a, grads);
  const NodeEntry lr = a.Variable(kLrName);
  for (const std::string& p : params) {
    std::vector<NodeEntry> inputs = {a.Param(p), grads.at(p)};
    for (const std::string& s : states) inputs.push_back(a.Variable(p + "." + s));
    if (multiplier) inputs.push_back(*multiplier);
    inputs.push_back(lr);
    const NodeEntry update = a.Op(op, attrs.at(p), std::move(inputs), p + "_update", p);
    a.builder().outputs.push_back(update);
    if (copies.count(p) != 0) a.builder().outputs.push_back({update.node, 1});
  }
  return std::move(a.builder()).Freeze();
}

// The name of the copy of parameter `param` in `dtype` ("fc1_weight.bfloat16").
std::string CopyName(const std::string& param, DType dtype) {
  return param + "." + std::string(DTypeName(dtype));
}

// The dtype of the auxiliary states of a trainer of `dtype` (TrainerOptions::dtype).
DType AuxiliaryDType(DType dtype) { return dtype == DType::kBFloat16 ? DType::kFloat32 : dtype; }

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Every argument's shape, from the data inputs' (float32), which must be arguments of the loss;
// the other arguments are parameters of `dtype`, or auxiliary states (AuxiliaryDType).
std::map<std::string, Shape> ArgumentShapes(const Symbol& loss,
                                            const std::map<std::string, Shape>& data_shapes,
                                            const std::vector<std::string>& auxiliary,
                                            DType dtype) {
  const std::vector<std::string> args = loss.ListArguments();
  std::map<std::string, DType> dtypes;
  for (const std::string& name : args) {
    if (data_shapes.count(name) == 0)
      dtypes[name] = Contains(auxiliary, name) ? AuxiliaryDType(dtype) : dtype;
  }
  for (const auto& [name, shape] : data_shapes) {
    if (Contains(args, name)) continue;
    WEFT_THROW("Trainer: data input '" << Abbreviate(name)
                                       << "' is not an argument of the loss; its arguments are "
                                       << QuotedList(args) << DidYouMean(name, args));
  }
  return InferArgumentShapes(loss.ToGraph(), data_shapes, dtypes);
}

// The trainer's own argument names must not be arguments of the loss already.
void CheckOwnNames(const std::map<std::string, Shape>& shapes,
                   const std::vector<std::string>& own) {
  for (const std::string& name : own) {
    if (shapes.count(name) != 0) {
      WEFT_THROW("Trainer: the loss has an argument named '"
                 << Abbreviate(name) << "', a name the trainer uses for its own arrays");
    }
  }
}

constexpr std::pair<Precision, const char*> kPrecisionNames[] = {
    {Precision::kFloat32, "float32"},
    {Precision::kBFloat16Mixed, "bfloat16-mixed"},
    {Precision::kFloat16Mixed, "float16-mixed"}};
}  // namespace

const char* PrecisionName(Precision precision) {
  for (const auto& [p, name] : kPrecisionNames)
    if (p == precision) return name;
  WEFT_THROW("unknown Precision " << static_cast<int>(precision));
}

Precision ParsePrecision(const std::string& name) {
  for (const auto& [p, n] : kPrecisionNames)
    if (name == n) return p;
  WEFT_THROW("expected a precision of 'float32', 'bfloat16-mixed' or 'float16-mixed', found '"
             << name << "'");
}

Trainer::Trainer(const Symbol& loss, const std::map<std::string, Shape>& data_shapes,
                 const Initializer& init, const Optimizer& optimizer, const TrainerOptions& options)
    : optimizer_(optimizer.Clone()), update_op_(optimizer.ForGraph().op), options_(options) {
  options_.schedule.Check();
  if (options.dtype != DType::kFloat32 && options.dtype != DType::kFloat64 &&
      options.dtype != DType::kBFloat16) {
    WEFT_THROW("Trainer: expected a parameter dtype of float32, float64 or bfloat16, found "
               << options.dtype);
  }
  if (!(options.clip_global_norm >= 0 && std::isfinite(options.clip_global_norm))) {
    WEFT_THROW("Trainer: expected clip_global_norm >= 0 (0: no clipping), found "
               << options.clip_global_norm);
  }
  if (options.precision != Precision::kFloat32 && options.dtype != DType::kFloat32) {
    WEFT_THROW(
        "Trainer: mixed precision keeps float32 master weights: expected dtype float32, "
        "found "
        << options.dtype);
  }
  if (options.precision == Precision::kFloat16Mixed && options.device.is_cpu()) {
    WEFT_THROW(
        "Trainer: float16 mixed precision needs a GPU (the CPU has no float16 arithmetic here); "
        "on the CPU use bfloat16 mixed precision (Precision::kBFloat16Mixed)");
  }
  if (options_.predict.num_outputs() == 0) options_.predict = loss;
  const Op& update = GetOp(update_op_);
  const std::vector<std::string> inputs =
      InputNames(update, ParseAttrs(update, {{"lr_input", "true"}}));  // weight, grad, states, lr
  states_.assign(inputs.begin() + 2, inputs.end() - 1);
  AllocateScaler();
  BindStep(loss, data_shapes, init);
  if (options_.communicator != nullptr) {
    for (const auto& [p, attrs] : param_updates_)
      param_update_attrs_[p] = ParseAttrs(GetOp(update_op_), attrs);
    PlanGradientBuckets(loss);
    BroadcastParameters();
  }
  RefreshCopies();
}

Trainer::~Trainer() = default;

// The data, parameter, gradient, state and auxiliary arrays, parameters and auxiliary states
// initialized in name order (the order of `shapes`), after the names are checked.
void Trainer::AllocateArrays(const std::map<std::string, Shape>& shapes,
                             const std::map<std::string, Shape>& data_shapes,
                             const std::vector<std::string>& auxiliary, const Initializer& init) {
  const auto is_aux = [&](const std::string& name) { return Contains(auxiliary, name); };
  std::vector<std::string> own = {kLrName, kLossScaleName, kCleanStepsName};
  for (const auto& [name, shape] : shapes) {
    if (data_shapes.count(name) != 0 || is_aux(name)) continue;
    params_.push_back(name);
    for (const std::string& s : states_) own.push_back(name + "." + s);
  }
  if (params_.empty())
    WEFT_THROW("Trainer: the loss has no parameter to train (every argument is a data input)");
  CheckOwnNames(shapes, own);
  const Device d = options_.device;
  for (const auto& [name, shape] : shapes) {
    if (data_shapes.count(name) != 0) {
      inputs_.push_back(name);
      const bool host = std::count(host_inputs_.begin(), host_inputs_.end(), name) !=
                        0;  // Executor::HostArguments
      data_[name] = NDArray(shape, host ? Device::Cpu() : d);
      continue;
    }
    if (is_aux(name)) {
      InitializeArray(name, aux_arrays_[name] = NDArray(shape, d, AuxiliaryDType(options_.dtype)),
                      init);
      continue;
    }
    InitializeArray(name, params_arrays_[name] = NDArray(shape, d, options_.dtype), init);
    grads_[name] = NDArray(shape, d, options_.dtype);
    for (const std::string& s : states_) {
      NDArray& state = state_arrays_[name + "." + s] = NDArray(shape, d, options_.dtype);
      state.Fill(0);
    }
  }
  const int64_t rates = static_cast<int64_t>(optimizer_->StepRates(1, 1).size());
  lr_ = NDArray(Shape{rates}, d, DType::kFloat64);
  const bool multiplier = options_.clip_global_norm > 0 || !scaler_.empty();
  for (const std::string& p : params_) {
    AttrMap& attrs = param_updates_[p] =
        ReadingTheRate(optimizer_->ForParameter(p, params_arrays_.at(p).shape())).attrs;
    if (multiplier) attrs["scale_input"] = "true";
    if (!scaler_.empty()) attrs["rescale_grad"] = FloatAttr(UpdateRescale());
  }
}

// The model's hook or `init` fills the array; in float32 first when its dtype is one that
// initializers do not fill (bfloat16), then cast.
void Trainer::InitializeArray(const std::string& name, const NDArray& array,
                              const Initializer& init) {
  const bool direct = array.dtype() == DType::kFloat32 || array.dtype() == DType::kFloat64;
  const NDArray target = direct ? array : NDArray(array.shape(), array.device());
  if (!options_.initialize || !options_.initialize(name, target)) init.Initialize(name, target);
  if (direct) return;
  const Op& cast = GetOp("Cast");
  const NDArray out[] = {array};
  InvokeInto(cast, ParseAttrs(cast, {{"dtype", std::string(DTypeName(array.dtype()))}}),
             std::span(&target, 1), out);
}

void Trainer::BindStep(const Symbol& loss, const std::map<std::string, Shape>& data_shapes,
                       const Initializer& init) {
  host_inputs_ = Executor::HostArguments(loss);
  const std::vector<std::string> auxiliary = Executor::MutatedArguments(loss);
  AllocateArrays(ArgumentShapes(loss, data_shapes, auxiliary, options_.dtype), data_shapes,
                 auxiliary, init);
  AllocateCopies(loss);
  ArrayMap args = data_;
  args.insert(copies_.begin(), copies_.end());
  args.insert(params_arrays_.begin(), params_arrays_.end());
  args.insert(aux_arrays_.begin(), aux_arrays_.end());
  if (!scaler_.empty())
    args[kLossScaleName] = scaler_.at(kLossScaleName);  // the head gradients read it
  if (options_.communicator ==
      nullptr) {  // else the updates, which read these, are not in the graph
    args.insert(state_arrays_.begin(), state_arrays_.end());
    args.insert(scaler_.begin(), scaler_.end());
    args[kLrName] = lr_;
  }
  std::map<std::string, GradReq> reqs;
  for (const std::string& p : params_) reqs[p] = GradReq::kWrite;
  const std::optional<PrecisionPolicy> policy = Policy();
  StepUpdates updates{update_op_,     param_updates_, states_, params_, options_.clip_global_norm,
                      UpdateRescale()};
  updates.grad_dtype = options_.dtype;
  if (policy) updates.copy_dtype = policy->low;
  if (!scaler_.empty()) {
    updates.scaler = scaler_attrs_;
    updates.head_rescale = optimizer_->rescale_grad();
  }
  std::vector<std::string> write_back;
  for (const std::string& p : params_) {
    write_back.push_back(p);
    if (CopyOf(p) != nullptr) updates.copies[p] = write_back.emplace_back(CopyName(p, policy->low));
  }
  GraphExtension extension{[updates](const Graph& g, const std::vector<std::string>& grad_args) {
                             return updates.Append(g, grad_args);
                           },
                           write_back, policy};
  // With a communicator the updates run after the all-reduces, outside the bound graph, which then
  // only reads the copies they write.
  if (options_.communicator != nullptr) {
    extension = {.precision = policy};
    if (!updates.copies.empty() || updates.scaler) {
      extension.append = [updates](const Graph& g, const std::vector<std::string>&) {
        return std::move(updates.Backward(g).builder()).Freeze();
      };
    }
  }
  exec_ = Executor::Bind(loss, options_.device, args, grads_, reqs, extension);
}

std::optional<LossScaling> Trainer::Scaling() const {
  if (options_.loss_scaling) return options_.loss_scaling;
  if (options_.precision == Precision::kFloat16Mixed) return LossScaling{};
  return std::nullopt;
}

// The scaler's state arrays, at the initial scale, and amp_update_scale's attributes (parsed
// here, so that bad settings are an error before anything is bound).
void Trainer::AllocateScaler() {
  const std::optional<LossScaling> scaling = Scaling();
  if (!scaling) return;
  if (!(scaling->initial_scale > 0 && scaling->initial_scale <= scaling->max_scale)) {
    WEFT_THROW("Trainer: loss scaling: expected 0 < initial_scale <= max_scale ("
               << scaling->max_scale << "), found " << scaling->initial_scale);
  }
  scaler_attrs_ = {{"growth_factor", FloatAttr(scaling->growth_factor)},
                   {"backoff_factor", FloatAttr(scaling->backoff_factor)},
                   {"growth_interval", std::to_string(scaling->growth_interval)},
                   {"max_scale", FloatAttr(scaling->max_scale)}};
  try {
    ParseAttrs(GetOp("amp_update_scale"), scaler_attrs_);
  } catch (const Error& e) {
    WEFT_THROW("Trainer: loss scaling: " << e.what());
  }
  NDArray& scale = scaler_[kLossScaleName] = NDArray(Shape{1}, options_.device);
  scale.Fill(scaling->initial_scale);
  scaler_[kCleanStepsName] = NDArray(Shape{1}, options_.device);
  scaler_[kCleanStepsName].Fill(0);
}

double Trainer::UpdateRescale() const { return scaler_.empty() ? optimizer_->rescale_grad() : 1; }

double Trainer::loss_scale() const {
  if (scaler_.empty()) return 1;
  return scaler_.at(kLossScaleName).ToVector<float>()[0];
}

std::optional<DType> Trainer::LowDType() const {
  if (options_.precision == Precision::kFloat32) return std::nullopt;
  return options_.precision == Precision::kFloat16Mixed ? DType::kFloat16 : DType::kBFloat16;
}

std::optional<PrecisionPolicy> Trainer::Policy() const {
  const std::optional<DType> low = LowDType();
  if (!low) return std::nullopt;
  return PrecisionPolicy{*low, options_.precision_overrides};
}

// The parameters the mixed step casts (as the bind's mixed_precision pass will) get a copy, which
// their update writes (its `copy` attribute).
void Trainer::AllocateCopies(const Symbol& loss) {
  const std::optional<PrecisionPolicy> policy = Policy();
  if (!policy) return;
  const std::vector<std::string> args = loss.ListArguments();
  for (const std::string& p : CastArguments(MixedPrecision(loss.ToGraph(), *policy), policy->low)) {
    if (params_arrays_.count(p) == 0) continue;  // a data input
    const std::string name = CopyName(p, policy->low);
    if (Contains(args, name)) {
      WEFT_THROW("Trainer: the loss has an argument named '"
                 << Abbreviate(name) << "', a name the trainer uses for its own arrays");
    }
    copies_[name] = NDArray(params_arrays_.at(p).shape(), options_.device, policy->low);
    param_updates_.at(p)["copy"] = std::string(DTypeName(policy->low));
  }
}

const NDArray* Trainer::CopyOf(const std::string& param) const {
  const std::optional<DType> low = LowDType();
  if (!low) return nullptr;
  auto it = copies_.find(CopyName(param, *low));
  return it == copies_.end() ? nullptr : &it->second;
}

void Trainer::RefreshCopies() {
  const Op& cast = GetOp("Cast");
  for (const std::string& p : params_) {
    const NDArray* copy = CopyOf(p);
    if (copy == nullptr) continue;
    const Attrs attrs = ParseAttrs(cast, {{"dtype", std::string(DTypeName(copy->dtype()))}});
    InvokeInto(cast, attrs, std::span(&params_arrays_.at(p), 1), std::span(copy, 1));
  }
}

double Trainer::learning_rate(int64_t t) const {
  const int64_t step = t == 0 ? steps_ + 1 : t;
  return options_.schedule.Rate(optimizer_->learning_rate(), step);
}

void Trainer::Step() {
  const int64_t t = steps_ + 1;
  std::vector<double> rates = optimizer_->StepRates(learning_rate(t), t);
  if (rates != lr_written_) {
    lr_written_ = rates;
    lr_.CopyFrom(std::move(rates));
  }
  exec_->TrainStep();
  if (options_.communicator != nullptr) AllReduceAndUpdate();
  steps_ = t;
}

void Trainer::CheckBatch(const ArrayMap& batch, bool complete) const {
  for (const auto& [name, array] : batch) {
    const NDArray& bound = Find(data_, "data input", name);
    if (array.is_none() || array.shape() != bound.shape()) {
      WEFT_THROW("Trainer: data input '"
                 << Abbreviate(name) << "': expected " << bound.shape() << ", found "
                 << (array.is_none() ? std::string("a null array") : array.ToString()));
    }
  }
  for (const std::string& name : inputs_) {
    if (complete && batch.count(name) == 0) {
      WEFT_THROW("Trainer: the batch has no data input '" << Abbreviate(name) << "'; expected "
                                                          << QuotedList(inputs_));
    }
  }
}

void Trainer::Step(const ArrayMap& batch) {
  CheckBatch(batch, /*complete=*/true);
  for (const auto& [name, array] : batch) array.CopyTo(data_.at(name));
  Step();
}

Trainer::ArrayMap Trainer::ArraysOf(const DataBatch& batch,
                                    const std::vector<std::string>& inputs) const {
  ArrayMap arrays;
  for (const std::string& name : inputs) {
    if (name == "data") arrays[name] = batch.data;
    if (name == "label") arrays[name] = batch.label;
  }
  return arrays;
}

void Trainer::Step(const DataBatch& batch) {
  const ArrayMap arrays = ArraysOf(batch, inputs_);
  CheckBatch(arrays, /*complete=*/false);
  for (const auto& [name, array] : arrays) array.CopyTo(data_.at(name));
  Step();
}

const std::vector<NDArray>& Trainer::outputs() const { return exec_->outputs(); }

ExecutorStats Trainer::stats() const { return exec_->stats(); }

std::string Trainer::ToDot(const std::string& after_pass) const { return exec_->ToDot(after_pass); }

const NDArray& Trainer::Find(const ArrayMap& arrays, const std::string& what,
                             const std::string& name) const {
  auto it = arrays.find(name);
  if (it == arrays.end()) {
    const std::vector<std::string> names = Keys(arrays);
    WEFT_THROW("Trainer: no " << what << " named '" << Abbreviate(name) << "'; the trainer's are "
                              << QuotedList(names) << DidYouMean(name, names));
  }
  return it->second;
}

const NDArray& Trainer::parameter(const std::string& name) const {
  return Find(params_arrays_, "parameter", name);
}
const NDArray& Trainer::gradient(const std::string& name) const {
  return Find(grads_, "parameter", name);
}
const NDArray& Trainer::state(const std::string& name) const {
  return Find(state_arrays_, "optimizer state", name);
}
const NDArray& Trainer::data(const std::string& name) const {
  return Find(data_, "data input", name);
}
std::vector<std::string> Trainer::state_names() const { return Keys(state_arrays_); }
const NDArray& Trainer::auxiliary(const std::string& name) const {
  return Find(aux_arrays_, "auxiliary state", name);
}
std::vector<std::string> Trainer::auxiliary_names() const { return Keys(aux_arrays_); }
const NDArray& Trainer::copy(const std::string& name) const {
  return Find(copies_, "16-bit copy", name);
}
std::vector<std::string> Trainer::copy_names() const { return Keys(copies_); }

}  // namespace weft
