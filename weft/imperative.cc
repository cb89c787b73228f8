#include "weft/imperative.h"

#include <algorithm>
#include <array>
#include <memory>

#include "core/error.h"
#include "core/object_pool.h"
#include "core/small_vector.h"
#include "ops/invocation.h"

namespace weft {

namespace {

// What one pushed call keeps until it has run (from a per-thread pool, not malloc: it is made on
// the pushing thread and freed on a worker; the Invocation keeps the usual handful of inputs,
// outputs and vars inline). It need not keep the arrays' memory alive: an array's memory is
// freed by an engine op on its var (Chunk's DeleteVariable), which runs only after every op
// pushed on that var before it, this one included.
struct Call {
  Call(const Op& op, const Attrs& attrs, Device device) : invocation(op, attrs, device) {}
  Invocation invocation;
  OpContext ctx;
};
struct ReturnCall {
  void operator()(Call* call) const { ObjectPool<Call>::Delete(call); }
};
using CallPtr = std::unique_ptr<Call, ReturnCall>;

void CheckInputs(const Op& op, const Attrs& attrs, std::span<const NDArray> inputs) {
  const int expected = NumInputs(op, attrs);
  if (static_cast<int>(inputs.size()) != expected) {
    WEFT_THROW("op '" << op.name << "': expected " << expected << " input(s), found "
                      << inputs.size());
  }
  const std::vector<int> host = op.HostInputsOf(attrs);  // none for almost every op: no allocation
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_none())
      WEFT_THROW("op '" << op.name << "': input " << i << " is a null array");
    if (std::find(host.begin(), host.end(), static_cast<int>(i)) != host.end()) {
      if (!inputs[i].device().is_cpu()) {
        WEFT_THROW("op '" << op.name << "': input " << i
                          << " is read on the host (Op::host_inputs): expected a CPU "
                          << "array, found one on " << inputs[i].device());
      }
    } else if (inputs[i].device() != inputs[0].device()) {
      WEFT_THROW("op '" << op.name << "': expected every input on " << inputs[0].device()
                        << ", found input " << i << " on " << inputs[i].device());
    }
  }
}

Device CallDevice(const Op& op, std::span<const NDArray> inputs, std::span<const NDArray> outputs) {
  if (!inputs.empty()) return inputs[0].device();
  for (const NDArray& o : outputs) {
    if (!o.is_none()) return o.device();
  }
  WEFT_THROW("op '" << op.name
                    << "' has no inputs: pass its outputs to say which device it runs on");
}

// What a call infers for its outputs, remembered per thread for the last kEntries distinct calls
// (op, attributes, input shapes and dtypes, device type): a call repeated on a hot path (the
// same elementwise op in a loop, an update per parameter) skips shape and type inference and
// allocates nothing for them. Inference is a pure function of that key; an entry holds a copy of
// the Attrs, so no other Attrs can take its identity while the entry lives. Only successful
// inferences are kept: a bad call throws every time.
class InferCache {
 public:
  struct Outputs {
    std::vector<Shape> shapes;
    std::vector<DType> types;
  };
  static InferCache& ForThisThread() {
    thread_local InferCache cache;
    return cache;
  }
  // Valid until the next Find on this thread.
  const Outputs& Find(const Op& op, const Attrs& attrs, std::span<const NDArray> inputs,
                      Device device) {
    for (const Entry& e : entries_) {
      if (Matches(e, op, attrs, inputs, device.type)) return e.out;
    }
    Entry& e = entries_[next_++ % kEntries];
    e.op = nullptr;  // invalid until inference succeeds
    e.in_shapes.clear();
    e.in_types.clear();
    for (const NDArray& a : inputs)
      e.in_shapes.push_back(a.shape()), e.in_types.push_back(a.dtype());
    e.out.shapes = InferShapes(op, attrs, e.in_shapes, device.type);
    e.out.types = InferTypes(op, attrs, e.in_types);
    e.attrs = attrs;
    e.device = device.type;
    e.op = &op;
    return e.out;
  }

 private:
  static constexpr size_t kEntries = 8;
  struct Entry {
    const Op* op = nullptr;  // null: empty
    Attrs attrs;
    DeviceType device = DeviceType::kCpu;
    std::vector<Shape> in_shapes;
    std::vector<DType> in_types;
    Outputs out;
  };
  static bool Matches(const Entry& e, const Op& op, const Attrs& attrs,
                      std::span<const NDArray> inputs, DeviceType device) {
    if (e.op != &op || e.device != device || e.attrs.identity() != attrs.identity() ||
        &e.attrs.raw() != &attrs.raw() || e.in_shapes.size() != inputs.size()) {
      return false;
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (e.in_types[i] != inputs[i].dtype() || e.in_shapes[i] != inputs[i].shape()) return false;
    }
    return true;
  }
  std::array<Entry, kEntries> entries_;
  size_t next_ = 0;
};

void CheckOutputs(const Op& op, const Attrs& attrs, std::span<const NDArray> inputs,
                  std::span<const NDArray> outputs, Device device) {
  const InferCache::Outputs& inferred = InferCache::ForThisThread().Find(op, attrs, inputs, device);
  const std::vector<Shape>& shapes = inferred.shapes;
  const std::vector<DType>& types = inferred.types;
  if (outputs.size() != shapes.size()) {
    WEFT_THROW("op '" << op.name << "': expected " << shapes.size() << " output array(s), found "
                      << outputs.size());
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    const NDArray& o = outputs[i];
    if (o.is_none() || o.shape() != shapes[i] || o.dtype() != types[i] || o.device() != device) {
      WEFT_THROW("op '" << op.name << "': output " << i << " must be " << shapes[i] << " "
                        << types[i] << " on " << device << ", found " << o.ToString());
    }
  }
}

// An output that overlaps an input is allowed only as an in-place pair the op declares, on
// exactly the same memory; it is then written with kWriteInplace (unless the caller asked for
// something else).
SmallVector<OpReq, 4> Requests(const Op& op, std::span<const NDArray> inputs,
                               std::span<const NDArray> outputs, std::span<const OpReq> asked) {
  if (!asked.empty()) {
    WEFT_CHECK_EQ(asked.size(), outputs.size()) << "op '" << op.name << "': one request per output";
  }
  SmallVector<OpReq, 4> req;
  for (size_t o = 0; o < outputs.size(); ++o)
    req.push_back(asked.empty() ? OpReq::kWrite : asked[o]);
  const auto& pairs = op.inplace;
  for (size_t o = 0; o < outputs.size(); ++o) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].Overlaps(outputs[o])) continue;
      const bool declared = std::count(pairs.begin(), pairs.end(), std::pair<int, int>(i, o)) > 0;
      if (!declared || !inputs[i].SameMemoryAs(outputs[o])) {
        WEFT_THROW("op '" << op.name << "': output " << o << " overlaps input " << i
                          << (declared ? " without being the same memory"
                                       : ", and the op cannot work in place on it")
                          << "; expected separate output arrays");
      }
      if (req[o] == OpReq::kWrite) req[o] = OpReq::kWriteInplace;
    }
  }
  return req;
}

// Calls on the CPU touching at most this many elements (inputs and outputs together) are pushed
// as small ops (engine::FnProperty::kCpuSmall): when their inputs are ready they run at once on
// the calling thread, for about the cost of the compute itself, where a hand-off to a worker
// costs more than the op (an elementwise op on 4,096 floats takes about a microsecond). Larger
// calls stay asynchronous, so the caller keeps pushing while a worker computes.
constexpr int64_t kSmallCallElements = 4096;

engine::FnProperty PropertyFor(Device device, std::span<const NDArray> inputs,
                               std::span<const NDArray> outputs) {
  if (!device.is_cpu()) return engine::FnProperty::kNormal;
  int64_t elements = 0;
  for (const NDArray& a : inputs) elements += a.size();
  for (const NDArray& a : outputs) elements += a.size();
  return elements <= kSmallCallElements ? engine::FnProperty::kCpuSmall
                                        : engine::FnProperty::kNormal;
}

// Pushes the call; the outputs exist and have been checked, and the op has a compute for `device`.
void Push(const Op& op, const Attrs& attrs, Device device, std::span<const NDArray> inputs,
          std::span<const NDArray> outputs, const SmallVector<OpReq, 4>& req, bool is_train) {
  CallPtr call(ObjectPool<Call>::New(op, attrs, device));  // owned by the pushed op from here on
  Invocation& invocation = call->invocation;
  for (const NDArray& a : inputs) invocation.AddInput(a.View(), a.var());
  for (size_t o = 0; o < outputs.size(); ++o)
    invocation.AddOutput(outputs[o].View(), outputs[o].var(), req[o]);
  call->ctx.is_train = is_train;
  if (const uint64_t draws = invocation.RandomDraws(is_train))
    call->ctx.random = ReserveRandom(device, draws);
  // The var lists live in the call, which the engine holds until the op has run.
  engine::Engine::Get()->PushSync(
      [call = std::move(call)](engine::RunContext run) {
        call->ctx.run = run;
        call->invocation.Run(call->ctx);
      },
      device, invocation.reads(), invocation.writes(), PropertyFor(device, inputs, outputs), 0,
      op.name.c_str());
}

}  // namespace

void InvokeInto(const Op& op, const Attrs& attrs, std::span<const NDArray> inputs,
                std::span<const NDArray> outputs, std::span<const OpReq> req, bool is_train) {
  CheckInputs(op, attrs, inputs);
  const Device device = CallDevice(op, inputs, outputs);
  ComputeFor(op, device);
  CheckOutputs(op, attrs, inputs, outputs, device);
  Push(op, attrs, device, inputs, outputs, Requests(op, inputs, outputs, req), is_train);
}

std::vector<NDArray> Invoke(const Op& op, const Attrs& attrs, const std::vector<NDArray>& inputs,
                            const InvokeOptions& options) {
  if (!options.outputs.empty()) {
    InvokeInto(op, attrs, inputs, options.outputs, options.req, options.is_train);
    return options.outputs;
  }
  CheckInputs(op, attrs, inputs);
  const Device device = CallDevice(op, inputs, {});
  ComputeFor(op, device);
  std::vector<NDArray> outputs;
  {
    const InferCache::Outputs& inferred =
        InferCache::ForThisThread().Find(op, attrs, inputs, device);
    outputs.reserve(inferred.shapes.size());
    for (size_t i = 0; i < inferred.shapes.size(); ++i) {
      outputs.emplace_back(inferred.shapes[i], device, inferred.types[i]);
    }
  }
  Push(op, attrs, device, inputs, outputs, Requests(op, inputs, outputs, options.req),
       options.is_train);
  return outputs;
}

std::vector<NDArray> Invoke(const std::string& op, const std::vector<NDArray>& inputs,
                            const AttrMap& attrs, const InvokeOptions& options) {
  const Op& def = GetOp(op);
  return Invoke(def, ParseAttrs(def, attrs), inputs, options);
}

}  // namespace weft
