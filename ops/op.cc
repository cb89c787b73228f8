#include "ops/op.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "core/mutex.h"
#include "core/no_destructor.h"
#include "core/text.h"
#include "storage/workspace.h"

namespace weft {

void* OpContext::Workspace(size_t bytes) const { return Workspace::For(run).Get(bytes); }

// ---- GradBuilder ----

GradEntry GradBuilder::Input(int i) const {
  WEFT_CHECK(i >= 0 && i < static_cast<int>(input_grads_.size()))
      << "gradient rule: no forward input " << i;
  return {GradEntry::Kind::kInput, i};
}

GradEntry GradBuilder::Output(int i) const {
  WEFT_CHECK(i >= 0 && i < num_outputs_) << "gradient rule: no forward output " << i;
  return {GradEntry::Kind::kOutput, i};
}

GradEntry GradBuilder::OutGrad(int i) const {
  WEFT_CHECK(i >= 0 && i < num_outputs_) << "gradient rule: no forward output " << i;
  return {GradEntry::Kind::kOutGrad, i};
}

GradEntry GradBuilder::Op(const std::string& op, std::vector<GradEntry> inputs, AttrMap attrs,
                          int num_outputs) {
  for (const GradEntry& e : inputs) {
    WEFT_CHECK(e.kind != GradEntry::Kind::kNode || e.index < static_cast<int>(nodes_.size()))
        << "gradient rule: node " << e.index << " used before it was built";
  }
  nodes_.push_back(GradNode{op, std::move(attrs), std::move(inputs), num_outputs});
  return {GradEntry::Kind::kNode, static_cast<int>(nodes_.size()) - 1, 0};
}

GradEntry GradBuilder::NodeOutput(GradEntry node, int output) const {
  WEFT_CHECK(node.kind == GradEntry::Kind::kNode)
      << "gradient rule: NodeOutput of something that is not a node";
  WEFT_CHECK(output >= 0 && output < nodes_[node.index].num_outputs)
      << "gradient rule: node '" << nodes_[node.index].op << "' has no output " << output;
  return {GradEntry::Kind::kNode, node.index, output};
}

void GradBuilder::SetInputGrad(int input, GradEntry grad) {
  WEFT_CHECK(input >= 0 && input < static_cast<int>(input_grads_.size()))
      << "gradient rule: no forward input " << input;
  input_grads_[input] = grad;
}

// ---- Op setters ----

Op& Op::Describe(std::string text) {
  description = std::move(text);
  return *this;
}
Op& Op::Inputs(std::vector<std::string> names) {
  input_names = std::move(names);
  return *this;
}
Op& Op::Inputs(std::function<std::vector<std::string>(const Attrs&)> names_of) {
  input_names_of = std::move(names_of);
  return *this;
}
Op& Op::VariadicInputs(CountFn count) {
  num_inputs = std::move(count);
  return *this;
}
Op& Op::Outputs(int count) {
  num_outputs = [count](const Attrs&) { return count; };
  return *this;
}
Op& Op::Outputs(CountFn count) {
  num_outputs = std::move(count);
  return *this;
}
Op& Op::VisibleOutputs(CountFn count) {
  visible_outputs = std::move(count);
  return *this;
}
Op& Op::InferShape(ShapeFn fn) {
  infer_shape = std::move(fn);
  return *this;
}
Op& Op::InferType(TypeFn fn) {
  infer_type = std::move(fn);
  return *this;
}
Op& Op::InferInputShapes(InputShapeFn fn) {
  infer_input_shapes = std::move(fn);
  return *this;
}
Op& Op::Gradient(GradientFn fn) {
  gradient = std::move(fn);
  return *this;
}
Op& Op::Inplace(std::vector<std::pair<int, int>> pairs) {
  inplace = std::move(pairs);
  return *this;
}
Op& Op::MutateInputs(std::vector<int> inputs) {
  mutate_inputs = std::move(inputs);
  return *this;
}
int Op::UpdatedInput(int output) const {
  for (const auto& [in, out] : inplace) {
    if (out == output &&
        std::find(mutate_inputs.begin(), mutate_inputs.end(), in) != mutate_inputs.end())
      return in;
  }
  return -1;
}
Op& Op::HostInputs(std::function<std::vector<int>(const Attrs&)> inputs_of) {
  host_inputs = std::move(inputs_of);
  return *this;
}
const char* Op::CaptureBarrier(DeviceType device, const Attrs& attrs) const {
  if (const char* barrier = On(device).capture_barrier) return barrier;
  return device != DeviceType::kCpu && !HostInputsOf(attrs).empty() ? kReadsHostInputs : nullptr;
}
Op& Op::Random(RandomDrawsFn draws) {
  WEFT_CHECK(draws != nullptr) << "op '" << name << "': Random needs the number of draws per call";
  random_draws = std::move(draws);
  return *this;
}
Op& Op::Pointwise(PointwiseKind kind, std::string functor) {
  pointwise = {kind, std::move(functor), nullptr, nullptr};
  return *this;
}
Op& Op::Pointwise(PointwiseFn fn) {
  pointwise = std::move(fn);
  return *this;
}
Op& Op::ValueInputs(std::function<bool(const Attrs&, int)> reads_values_of) {
  value_inputs = std::move(reads_values_of);
  return *this;
}

Op& Op::PassOnly(const std::string& pass) {
  pass_only = true;
  parse = [op = name, pass](AttrReader&) -> ParsedParams {
    WEFT_THROW("op '" << op << "' is made by " << pass
                      << " when a graph is bound; it cannot be called or written "
                      << "in a graph");
  };
  return *this;
}

// ---- Registry ----

namespace {

struct Registry {
  Mutex mu;
  // Entries never move or die: an Op& stays valid for the process.
  std::map<std::string, std::unique_ptr<Op>> ops WEFT_GUARDED_BY(mu);
  // RegisterDeviceImpls rows that came before their op's RegisterOp, as what they set on the op.
  std::multimap<std::string, std::function<void(Op&)>> pending WEFT_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static NoDestructor<Registry> registry;  // ops are used by engine work at exit
  return *registry;
}

}  // namespace

Op& RegisterOp(const std::string& name) {
  Registry& r = GetRegistry();
  MutexLock lock(&r.mu);
  auto [it, inserted] = r.ops.emplace(name, std::make_unique<Op>());
  WEFT_CHECK(inserted) << "op '" << name << "' is registered twice";
  it->second->name = name;
  auto [first, last] = r.pending.equal_range(name);
  for (auto p = first; p != last; ++p) p->second(*it->second);
  r.pending.erase(first, last);
  return *it->second;
}

namespace {

// Applies `set` to op `name` now, or when the op is registered.
void SetOnOp(const std::string& name, std::function<void(Op&)> set) {
  Registry& r = GetRegistry();
  MutexLock lock(&r.mu);
  auto it = r.ops.find(name);
  if (it == r.ops.end()) {
    r.pending.emplace(name, std::move(set));
  } else {
    set(*it->second);
  }
}

}  // namespace

namespace {

const char* DeviceName(DeviceType device) { return device == DeviceType::kCpu ? "cpu" : "gpu"; }

}  // namespace

void RegisterDeviceImpls(DeviceType device, std::vector<NamedDeviceImpl> table) {
  for (NamedDeviceImpl& row : table) {
    WEFT_CHECK(row.impl.compute != nullptr)
        << "op '" << row.op << "' on " << DeviceName(device) << ": a DeviceImpl needs compute";
    SetOnOp(row.op, [device, impl = std::move(row.impl)](Op& op) {
      DeviceImpl& slot = op.impls[static_cast<int>(device)];
      WEFT_CHECK(!slot) << "op '" << op.name << "' has two impls on " << DeviceName(device);
      slot = impl;
    });
  }
}

std::vector<std::string> UnmatchedDeviceImpls() {
  Registry& r = GetRegistry();
  MutexLock lock(&r.mu);
  std::vector<std::string> names;
  for (const auto& [name, entry] : r.pending) names.push_back(name);
  return names;
}

const Op* FindOp(const std::string& name) {
  Registry& r = GetRegistry();
  MutexLock lock(&r.mu);
  auto it = r.ops.find(name);
  return it == r.ops.end() ? nullptr : it->second.get();
}

const Op& GetOp(const std::string& name) {
  if (const Op* op = FindOp(name)) return *op;
  WEFT_THROW("unknown op '" << Abbreviate(name) << "'" << DidYouMean(name, ListOps()));
}

std::vector<std::string> ListOps() {
  Registry& r = GetRegistry();
  MutexLock lock(&r.mu);
  std::vector<std::string> names;
  for (const auto& [name, op] : r.ops) names.push_back(name);
  return names;
}

Attrs ParseAttrs(const Op& op, const AttrMap& attrs) {
  AttrReader reader(op.name, attrs);
  ParsedParams parsed = op.parse ? op.parse(reader) : ParsedParams{};
  reader.CheckAllRead();
  return Attrs(attrs, std::move(parsed), &op.name);
}

int NumInputs(const Op& op, const Attrs& attrs) {
  if (op.num_inputs) return op.num_inputs(attrs);
  return static_cast<int>(op.input_names_of ? op.input_names_of(attrs).size()
                                            : op.input_names.size());
}

std::vector<std::string> InputNames(const Op& op, const Attrs& attrs) {
  return op.input_names_of ? op.input_names_of(attrs) : op.input_names;
}

int NumOutputs(const Op& op, const Attrs& attrs) {
  return op.num_outputs ? op.num_outputs(attrs) : 1;
}

int NumVisibleOutputs(const Op& op, const Attrs& attrs) {
  return op.visible_outputs ? op.visible_outputs(attrs) : NumOutputs(op, attrs);
}

namespace {

std::string ShapeList(const std::vector<Shape>& shapes) {
  std::ostringstream os;
  for (size_t i = 0; i < shapes.size(); ++i) os << (i ? ", " : "") << shapes[i];
  return os.str();
}

}  // namespace

std::vector<Shape> InferShapes(const Op& op, const Attrs& attrs, const std::vector<Shape>& inputs,
                               std::optional<DeviceType> device) {
  const int expected = NumInputs(op, attrs);
  if (static_cast<int>(inputs.size()) != expected) {
    WEFT_THROW("op '" << op.name << "': expected " << expected << " input(s), found "
                      << inputs.size());
  }
  WEFT_CHECK(op.infer_shape != nullptr) << "op '" << op.name << "' has no shape inference";
  std::vector<Shape> out;
  try {
    out = op.infer_shape(attrs, inputs);
    const DeviceShapeFn* refine = device ? &op.On(*device).output_shapes : nullptr;
    if (refine != nullptr && *refine) (*refine)(attrs, inputs, out);
  } catch (const Error& e) {
    WEFT_THROW(e.what() << " [op '" << op.name << "', input shapes " << ShapeList(inputs) << "]");
  }
  WEFT_CHECK_EQ(static_cast<int>(out.size()), NumOutputs(op, attrs))
      << "op '" << op.name << "': shape inference";
  return out;
}

DType OneInputType(const std::string& op, const std::vector<DType>& inputs, size_t count) {
  for (size_t i = 1; i < std::min(count, inputs.size()); ++i) {
    if (inputs[i] != inputs[0]) {
      WEFT_THROW("op '" << op << "': expected every input to be " << inputs[0] << ", found "
                        << inputs[i] << " for input " << i);
    }
  }
  return inputs[0];
}

std::vector<DType> InferTypes(const Op& op, const Attrs& attrs, const std::vector<DType>& inputs) {
  if (op.infer_type) return op.infer_type(attrs, inputs);
  WEFT_CHECK(!inputs.empty()) << "op '" << op.name << "' has no inputs and no type inference";
  return std::vector<DType>(NumOutputs(op, attrs), OneInputType(op.name, inputs));
}

}  // namespace weft
