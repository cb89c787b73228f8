// The operator registry. An op is defined once, with everything the layers above need:
// attribute parsing, input/output counts and names, shape and type inference, a gradient rule that
// builds backward nodes, in-place options, the inputs it mutates, its random draws, and, for
// pointwise ops, the functor the fusion code generator calls. Each device adds one DeviceImpl
// (compute, and what else is per device), in the one table at the end of its compute file.
//
//   WEFT_REGISTER_OP(Pooling)                                  // ops/nn/pooling.cc
//       .Describe("2-D max or average pooling over NCHW data")
//       .Params(ParsePool)
//       .Inputs({"data"})
//       .InferShape(PoolShape)
//       .Gradient(GradientFromBackwardOp("Pooling"));
//   WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, {             // ops/cpu/pooling.cc
//       {"Pooling", {.compute = PoolForward}},
//       {"_backward_Pooling", {.compute = PoolBackward}},
//   });
//
//   const Op& op = GetOp("Pooling");    // throws weft::Error: unknown op 'Poolnig'
//
// ---- Adding an op ----
//
// A pointwise op (say `softsign`, x / (1 + |x|)) touches two library files and two tests (an op
// with two scalar attributes, like clip, is defined beside the table instead: unary.cc shows how):
//   1. ops/math/unary.h: the functor `fn::SoftSign`, Fwd and the gradient it reads; the CPU loops,
//      the GPU kernels (NVRTC) and fused kernels all call it, so there is no other math to write.
//   2. ops/elementwise/unary_ops.h: one row, X(softsign, SoftSign, "x / (1 + |x|)", false). The
//      definition, both devices' computes, the typed call op::softsign (weft/ops.h) and the
//      fusion pass all expand that table.
//   3. tests/ops_elementwise_test.cc: a double-precision reference for the declarative case (run
//      on the CPU and the GPU, with a finite-difference gradient check), and
//      tests/ops_fusion_property_test.cc: its range rule for the random fused graphs.
// A binary op is the same with ops/math/binary.h and ops/elementwise/binary_ops.h.
//
// A layer with parameters (say `GroupNorm`, data and per-channel scale and shift) touches four
// library files and one test:
//   1. ops/nn/nn_params.h: its parameter struct (what the definition parses and computes read).
//   2. ops/nn/group_norm.cc: the definition: WEFT_REGISTER_OP for GroupNorm and its backward op,
//      with parsing, shape inference (InferInputShapes for the parameters' shapes) and the
//      gradient (GradientFromBackwardOp, ops/internal/op_util.h).
//   3. ops/cpu/group_norm.cc: the CPU compute (oneDNN or loops) and its one
//      WEFT_REGISTER_DEVICE_IMPLS table.
//   4. ops/gpu/group_norm.cc: the GPU compute (cuDNN, cuBLAS or an NVRTC kernel in
//      ops/gpu/kernels/) and its table; GpuCall (ops/gpu/internal/gpu_call.h) gives the stream,
//      workspace and library handles.
//   5. tests/ops_nn_test.cc: a declarative case (tests/op_test_util.h) with a reference; it runs
//      on every device, gradient included, and op_coverage_test fails until every op with a
//      compute on a device has one.
// Nothing else changes: BUILD globs pick up the files, Symbol::Op and op::Call reach the op by
// name, the passes read the definition's flags, and the README's op list gets a row.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor_view.h"
#include "engine/engine.h"
#include "ops/attrs.h"
#include "storage/random.h"

namespace weft {

// How an op writes each output.
enum class OpReq : uint8_t {
  kNull,          // not needed: skip it
  kWrite,         // overwrite
  kWriteInplace,  // overwrite; the output shares memory with an input (see Op::inplace)
  kAddTo,         // add to what is there (gradient accumulation)
};

// Write in place is a write: what a request means to code that does not care whether the output
// shares memory with an input.
inline OpReq AsWrite(OpReq r) { return r == OpReq::kWriteInplace ? OpReq::kWrite : r; }
inline bool Writes(OpReq r) { return AsWrite(r) == OpReq::kWrite; }

// What a running op gets besides its tensors.
struct OpContext {
  engine::RunContext run;
  bool is_train = false;
  RandomKey random;  // the range reserved for this call (Op::random_draws numbers), for random ops
  // Per input, where the caller knows it: the version (engine::LastWritePushed at push) of an input
  // that is a bound graph's argument no op of the graph writes; 0 elsewhere. Equal versions of a
  // buffer mean equal contents, so an op may keep what it derives from such an input (a
  // convolution's weight in oneDNN's layout) until the version changes. Empty: none known.
  std::span<const uint64_t> input_versions;
  // Temporary memory, valid until the op returns; owned by the worker running the op.
  void* Workspace(size_t bytes) const;
};

using ComputeFn =
    std::function<void(const OpContext& ctx, const Attrs& attrs, std::span<const TensorView> inputs,
                       std::span<const OpReq> req, std::span<const TensorView> outputs)>;

// ---- Gradient rules -------------------------------------------------------------------------

// What a backward node reads: a forward input, a forward output, the gradient flowing into a
// forward output, or an output of a backward node the same rule built earlier.
struct GradEntry {
  enum class Kind : uint8_t { kInput, kOutput, kOutGrad, kNode };
  Kind kind;
  int index;       // which input/output/node
  int output = 0;  // for kNode: which output of that node
};

struct GradNode {
  std::string op;
  AttrMap attrs;
  std::vector<GradEntry> inputs;
  int num_outputs = 1;
};

// Collects the backward nodes of one forward op and the gradient of each of its inputs.
class GradBuilder {
 public:
  GradBuilder(int num_inputs, int num_outputs)
      : input_grads_(num_inputs), num_outputs_(num_outputs) {}
  GradEntry Input(int i) const;
  GradEntry Output(int i) const;
  GradEntry OutGrad(int i) const;
  // Appends a node running `op`; returns its first output (Node(...) names the others).
  GradEntry Op(const std::string& op, std::vector<GradEntry> inputs, AttrMap attrs = {},
               int num_outputs = 1);
  GradEntry NodeOutput(GradEntry node_first_output, int output) const;
  void SetInputGrad(int input, GradEntry grad);

  const std::vector<GradNode>& nodes() const { return nodes_; }
  // One per forward input; nullopt where the input gets no gradient (an index, a label).
  const std::vector<std::optional<GradEntry>>& input_grads() const { return input_grads_; }

 private:
  std::vector<GradNode> nodes_;
  std::vector<std::optional<GradEntry>> input_grads_;
  int num_outputs_;
};

using GradientFn = std::function<void(const Attrs& attrs, GradBuilder& grad)>;

// ---- Pointwise ops --------------------------------------------------------------------------

// Which member of its functor a pointwise op applies, elementwise (ops/math/ defines the functors).
enum class PointwiseKind : uint8_t {
  kNone,            // not pointwise
  kUnary,           // y = F::Fwd(x, scalars...)                  (ops/math/unary.h)
  kUnaryBackward,   // dx = BackwardOf<F>(dy, x or y, scalars...) (ops/math/unary.h)
  kBinary,          // y = F::Fwd(l, r), with broadcasting        (ops/math/binary.h)
  kBinaryBackward,  // dl = dy * F::DL(l, r), dr = dy * F::DR(l, r)
  kTernary,         // y = F::Fwd(c, a, b)                        (ops/math/ternary.h); fused only
                    // where every operand has the output's shape
  kAddN,            // y = x0 + x1 + ... (no functor)
  kCast,            // y = x converted to the output's dtype (inputs after the first: dtype only)
  kReshape,         // y = x seen with another shape of the same size (inputs after the first:
                    // shape only); row-major, so an identity on the flat index
  kUpdate,          // an optimizer update: F::Step(...)          (ops/math/optimizer.h)
};

// The scalars a unary functor takes after its value, from the op's attributes, in order: the
// `scalar` of the *_scalar forms, clip's (a_min, a_max); none for most ops. The unfused kernels
// take kMaxPointwiseScalars of them (the unused ones 0), a fused kernel's arguments only `count`.
inline constexpr int kMaxPointwiseScalars = 2;
// Whether input `input` of a pointwise op of `kind` is read as data: a cast or reshape reads its
// later inputs for their dtype or shape only. The one rule behind Op::ReadsInputValues (the
// engine waits for no writer of such an input, memory planning frees it after its last value
// reader) and fusion (the groups and both devices' fused code read no such input).
inline bool ReadsAsData(PointwiseKind kind, int input) {
  return input == 0 || (kind != PointwiseKind::kCast && kind != PointwiseKind::kReshape);
}

struct PointwiseScalars {
  int count = 0;
  double values[kMaxPointwiseScalars] = {};
};

// The code a pointwise op runs, named so that the fusion code generator calls exactly the functor
// the op's CPU and GPU computes call: never an expression of its own.
struct PointwiseFn {
  PointwiseKind kind = PointwiseKind::kNone;
  std::string functor;  // "weft::fn::Relu"; empty for kAddN, kCast, kReshape
  // For ops whose functor or scalars an attribute chooses (Activation's act_type, the `scalar` of
  // the *_scalar forms, clip's bounds); null: `functor`, and no scalars.
  std::function<std::string(const Attrs&)> functor_of;
  std::function<PointwiseScalars(const Attrs&)> scalars_of;

  explicit operator bool() const { return kind != PointwiseKind::kNone; }
  std::string Functor(const Attrs& a) const { return functor_of ? functor_of(a) : functor; }
  PointwiseScalars Scalars(const Attrs& a) const {
    return scalars_of ? scalars_of(a) : PointwiseScalars{};
  }
};

// Bind-time preparation of one call whose tensors will not change (a bound graph's node: the
// memory plan's buffers never move): returns the compute to run for exactly these tensors and
// requests, free to hold what it prepared (a compiled kernel, a table of pointers). Ops without
// one run their ordinary compute.
using PrepareFn =
    std::function<ComputeFn(const Attrs& attrs, Device device, std::span<const TensorView> inputs,
                            std::span<const OpReq> req, std::span<const TensorView> outputs)>;

// ---- The op ---------------------------------------------------------------------------------

using ShapeFn = std::function<std::vector<Shape>(const Attrs&, const std::vector<Shape>& inputs)>;
// Fills in the shapes of inputs it can derive from the others (a layer's weight from its data), so
// a graph's parameter shapes follow from its data shape. Entries already known stay as they are.
using InputShapeFn = std::function<void(const Attrs&, std::vector<std::optional<Shape>>& inputs)>;
using TypeFn = std::function<std::vector<DType>(const Attrs&, const std::vector<DType>& inputs)>;
// For outputs whose size only a device's library knows (the RNN's reserve space: what oneDNN's
// forward hands its backward on the CPU, cuDNN's reserve on a GPU): given the shapes infer_shape
// gave, sets those outputs' shapes for calls on that device. It may change no other output.
using DeviceShapeFn = std::function<void(const Attrs&, const std::vector<Shape>& inputs,
                                         std::vector<Shape>& outputs)>;
using CountFn = std::function<int(const Attrs&)>;
// How many 32-bit random numbers one call draws, for these inputs and mode (Dropout: one per
// element in training, none outside it). Declared with the op's compute, where it is true; the
// call's OpContext::random is a range of exactly that many (storage/random.h), and a bound
// graph's bulk segment hands each of its ops a range of its own. Read through
// Invocation::RandomDraws (ops/invocation.h).
using RandomDrawsFn =
    std::function<uint64_t(const Attrs&, std::span<const TensorView> inputs, bool is_train)>;

// Everything an op does on one device: what that device's compute file registers, in the one
// WEFT_REGISTER_DEVICE_IMPLS table at its end.
struct DeviceImpl {
  ComputeFn compute;            // required
  PrepareFn prepare;            // optional: bind-time preparation (Invocation::Prepare)
  DeviceShapeFn output_shapes;  // optional: outputs only this device's library can size
  // Why a CUDA graph cannot record `compute` (it checks its input on the device, waits on the
  // host, or orders with the legacy stream); null: it can. A captured training step runs such an
  // op as an engine op of its own, between captured parts. A string literal.
  const char* capture_barrier = nullptr;

  explicit operator bool() const { return compute != nullptr; }
};

// One row of a device's table: the op's name and what the device does for it.
struct NamedDeviceImpl {
  std::string op;
  DeviceImpl impl;
};

struct Op {
  std::string name;
  std::string description;
  std::function<ParsedParams(AttrReader&)> parse;  // default: takes no attributes
  CountFn num_inputs;                              // default: input_names.size()
  CountFn num_outputs;                             // default: 1
  // The outputs a Symbol shows, the first ones (default: all). The rest are the op's own, for its
  // backward (the RNN's reserve): entries of the graph, ordered and freed by the engine like any.
  CountFn visible_outputs;
  std::vector<std::string> input_names;  // fixed names; variadic ops name inputs arg0, arg1, ...
  // Names that attributes choose (null: input_names).
  std::function<std::vector<std::string>(const Attrs&)> input_names_of;
  ShapeFn infer_shape;              // required
  InputShapeFn infer_input_shapes;  // optional (layers with parameters)
  TypeFn infer_type;                // default: every output has input 0's dtype
  GradientFn gradient;              // null: no gradient (not differentiable, or a backward op)
  std::vector<std::pair<int, int>> inplace;  // (input, output) pairs that may share memory
  // Inputs the op updates (optimizer state). One that is also in place with an output (write_at)
  // is that output: a bound graph gives the output the input's own array (UpdatedInput).
  std::vector<int> mutate_inputs;
  RandomDrawsFn random_draws;  // set for ops that draw random numbers
  PointwiseFn pointwise;       // for pointwise ops: the functor they apply (fusion)
  // Whether input i's values are read (ReadsInputValues); null: ReadsAsData(pointwise.kind, i).
  std::function<bool(const Attrs&, int)> value_inputs;
  bool pass_only = false;  // made only by a graph pass: never called, never in JSON
  // Inputs read on the host whatever the op's device (for these attributes; null: none), as a
  // library takes them (cuDNN's RNN data descriptors take each sequence's length on the host):
  // CPU arrays on every device, read by the compute once their writers are done, so the op needs
  // no device-to-host copy and no synchronization. On the CPU they are inputs like the others. A
  // graph binds them as CPU arguments (executor.h), and a captured step never records a node that
  // reads one (a replay would not see new values): kReadsHostInputs is its capture barrier.
  std::function<std::vector<int>(const Attrs&)> host_inputs;
  static constexpr char kReadsHostInputs[] =
      "it reads inputs on the host (Op::host_inputs), which a replay would not see change";
  // Per device, set by RegisterDeviceImpls; read with On().
  std::array<DeviceImpl, kNumDeviceTypes> impls;

  // Builder setters used by WEFT_REGISTER_OP.
  Op& Describe(std::string text);
  template <typename P>
  Op& Params(P (*parse_fn)(AttrReader&)) {
    parse = [parse_fn](AttrReader& r) { return ParsedParams::Of<P>(parse_fn(r)); };
    return *this;
  }
  Op& Inputs(std::vector<std::string> names);
  Op& Inputs(std::function<std::vector<std::string>(const Attrs&)> names_of);
  Op& VariadicInputs(CountFn count);
  Op& Outputs(int count);
  Op& Outputs(CountFn count);
  Op& VisibleOutputs(CountFn count);
  Op& InferShape(ShapeFn fn);
  Op& InferType(TypeFn fn);
  Op& InferInputShapes(InputShapeFn fn);
  Op& Gradient(GradientFn fn);
  Op& Inplace(std::vector<std::pair<int, int>> pairs);
  Op& MutateInputs(std::vector<int> inputs);
  Op& HostInputs(std::function<std::vector<int>(const Attrs&)> inputs_of);
  Op& Random(RandomDrawsFn draws);
  Op& Pointwise(PointwiseKind kind, std::string functor = {});
  Op& Pointwise(PointwiseFn fn);
  Op& ValueInputs(std::function<bool(const Attrs&, int)> reads_values_of);
  // An op that only a graph pass creates (the fused op): parsing attributes for it, as a call or
  // a graph's JSON would, is an error saying so.
  Op& PassOnly(const std::string& pass);

  // What the op does on `device`; false (no compute) where no file registered it.
  const DeviceImpl& On(DeviceType device) const { return impls[static_cast<int>(device)]; }
  // Draws random numbers (OpContext::random): never merged by CSE, never fused.
  bool IsRandom() const { return random_draws != nullptr; }
  // Has an effect beyond its outputs (random draws, or inputs it updates): CSE never merges it
  // and fusion never absorbs it, whatever else it matches.
  bool HasEffects() const { return IsRandom() || !mutate_inputs.empty(); }
  // Whether the op reads input `input`'s values, not only its shape and dtype: _backward_Cast's
  // and reshape_like's second inputs are read for those only (ReadsAsData), as are a fused
  // group's inputs that only such steps read. The engine waits for no writer of such an input
  // (Invocation::reads) and memory planning keeps no buffer alive for it.
  bool ReadsInputValues(const Attrs& attrs, int input) const {
    return value_inputs ? value_inputs(attrs, input) : ReadsAsData(pointwise.kind, input);
  }
  // The input that output `output` is, updated in place (see mutate_inputs); -1 for none.
  int UpdatedInput(int output) const;
  // host_inputs for `attrs`; empty when the op has none.
  std::vector<int> HostInputsOf(const Attrs& attrs) const {
    return host_inputs ? host_inputs(attrs) : std::vector<int>{};
  }
  // Why a CUDA graph cannot record this call on `device`: the impl's capture_barrier, else
  // kReadsHostInputs for a GPU call with host inputs; null: it can.
  const char* CaptureBarrier(DeviceType device, const Attrs& attrs) const;
};

Op& RegisterOp(const std::string& name);
// Sets what each op of `table` does on `device`, whether the op is registered before or after
// this call (static initialization order across files is unspecified). An op gets one impl per
// device: a second is an error, as is a row without compute. Called by
// WEFT_REGISTER_DEVICE_IMPLS.
void RegisterDeviceImpls(DeviceType device, std::vector<NamedDeviceImpl> table);
// Ops named in a device table that no op was registered under (a typo in a compute file).
std::vector<std::string> UnmatchedDeviceImpls();
const Op* FindOp(const std::string& name);  // null when unknown
const Op& GetOp(const std::string& name);   // throws weft::Error naming the op
std::vector<std::string> ListOps();

// Parses `attrs` for `op`: typed, validated, and every attribute must be one the op reads.
Attrs ParseAttrs(const Op& op, const AttrMap& attrs);
// Shape and type inference with the op's checks, and errors that name the op and the shapes. With
// `device`, the shapes of a call on that device (Op::device_shape); without, the device-neutral
// ones, which are enough for everything but allocating such an op's own outputs.
std::vector<Shape> InferShapes(const Op& op, const Attrs& attrs, const std::vector<Shape>& inputs,
                               std::optional<DeviceType> device = std::nullopt);
std::vector<DType> InferTypes(const Op& op, const Attrs& attrs, const std::vector<DType>& inputs);
// inputs[0], after checking that inputs [0, count) (all of them by default) have that one dtype:
// a weft::Error naming op `op` and the first input that differs otherwise (the default type
// inference's rule, for an op's own inference to call).
DType OneInputType(const std::string& op, const std::vector<DType>& inputs,
                   size_t count = static_cast<size_t>(-1));
int NumInputs(const Op& op, const Attrs& attrs);
int NumOutputs(const Op& op, const Attrs& attrs);
// The inputs' names (Op::input_names_of, else Op::input_names; variadic ops may name fewer).
std::vector<std::string> InputNames(const Op& op, const Attrs& attrs);
int NumVisibleOutputs(const Op& op, const Attrs& attrs);

}  // namespace weft

#define WEFT_OP_CONCAT_INNER_(a, b) a##b
#define WEFT_OP_CONCAT_(a, b) WEFT_OP_CONCAT_INNER_(a, b)
// Registers an op at static initialization. The library that holds registrations must be linked
// with alwayslink = True so the registrations are not dropped.
// Registers a device's impls at static initialization: each compute file ends with one table,
//   WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, {
//       {"Convolution", {.compute = ConvForward}},
//       {"_backward_Convolution", {.compute = ConvBackward}},
//   });
// or, for ops that an X-macro table lists, a function returning the rows. The library that holds
// registrations must be linked with alwayslink = True so they are not dropped.
#define WEFT_REGISTER_DEVICE_IMPLS(device, ...)                                             \
  [[maybe_unused]] static const bool WEFT_OP_CONCAT_(weft_registered_impls_, __COUNTER__) = \
      (::weft::RegisterDeviceImpls(device, __VA_ARGS__), true)
#define WEFT_REGISTER_OP(name)                                                            \
  [[maybe_unused]] static ::weft::Op& WEFT_OP_CONCAT_(weft_registered_op_, __COUNTER__) = \
      ::weft::RegisterOp(#name)
