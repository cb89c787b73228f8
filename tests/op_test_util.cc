#include "tests/op_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <string>

#include "core/error.h"
#include "storage/ndarray.h"
#include "storage/random.h"
#include "weft/imperative.h"

namespace weft::testing {

namespace {

Values DefaultInit(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Values v(n);
  for (double& x : v) x = u(rng);
  return v;
}

Inputs MakeInputs(const OpCase& c) {
  std::mt19937_64 rng(std::hash<std::string>()(c.op) ^ c.input_shapes.size());
  Inputs in;
  for (size_t i = 0; i < c.input_shapes.size(); ++i) {
    Values v = DefaultInit(rng, static_cast<size_t>(c.input_shapes[i].Size()));
    if (c.init) c.init(static_cast<int>(i), v);
    in.push_back(std::move(v));
  }
  return in;
}

// The device of each input of `op` called on `device`: the CPU for its host inputs
// (Op::host_inputs).
std::vector<Device> InputDevices(const std::string& op, const AttrMap& attrs, size_t count,
                                 Device device) {
  const Op& def = GetOp(op);
  const std::vector<int> host = def.HostInputsOf(ParseAttrs(def, attrs));
  std::vector<Device> devices(count, device);
  for (int i : host) {
    if (static_cast<size_t>(i) < count) devices[i] = Device::Cpu();
  }
  return devices;
}

// The case's inputs as arrays for a call on `device`.
template <typename T>
std::vector<NDArray> ToArrays(const Inputs& in, const OpCase& c, Device device = Device::Cpu()) {
  const std::vector<Device> devices = InputDevices(c.op, c.attrs, in.size(), device);
  std::vector<NDArray> arrays;
  for (size_t i = 0; i < in.size(); ++i) {
    std::vector<T> v(in[i].begin(), in[i].end());
    arrays.push_back(NDArray::FromVector(v, c.input_shapes[i], devices[i]));
  }
  return arrays;
}

// An array's values, whichever float dtype it holds (an op's output dtype may differ from its
// inputs': Cast).
Values ToValues(const NDArray& a) {
  if (a.dtype() == DType::kFloat64) return a.ToVector<double>();
  const std::vector<float> v = a.ToVector<float>();
  return Values(v.begin(), v.end());
}

std::string Name(const OpCase& c) { return c.name.empty() ? c.op : c.name; }

// The outputs the reference gives: the visible ones. The others are the op's own (the RNN's
// reserve): written with kWrite, never compared, and given zero gradients.
size_t Visible(const OpCase& c) {
  const Op& op = GetOp(c.op);
  return static_cast<size_t>(NumVisibleOutputs(op, ParseAttrs(op, c.attrs)));
}

// The request for output o when the visible ones get `req`.
OpReq RequestFor(const OpCase& c, size_t o, OpReq req) {
  return o < Visible(c) ? req : OpReq::kWrite;
}

// A zero gradient for a hidden output.
NDArray Zeros(const NDArray& like) {
  NDArray z(like.shape(), like.device(), like.dtype());
  z.Fill(0);
  return z;
}

void CheckForward(const OpCase& c, const Inputs& in) {
  // The reference sees the inputs as float32 would hold them.
  Inputs rounded = in;
  for (Values& v : rounded)
    for (double& x : v) x = static_cast<float>(x);
  const Outputs want = c.reference(rounded);
  std::vector<NDArray> outputs =
      Invoke(c.op, ToArrays<float>(in, c), c.attrs, {.is_train = c.is_train});
  ASSERT_EQ(Visible(c), want.size()) << Name(c) << ": output count";
  for (size_t o = 0; o < want.size(); ++o) {
    ExpectNear(ToValues(outputs[o]), want[o], c.tolerance,
               Name(c) + " forward output " + std::to_string(o));
  }
  // req kAddTo: start from known values, expect them plus the result.
  std::vector<NDArray> acc;
  std::vector<Values> before;
  std::vector<OpReq> reqs;
  for (size_t o = 0; o < outputs.size(); ++o) {
    NDArray a(outputs[o].shape(), outputs[o].device(), outputs[o].dtype());
    reqs.push_back(RequestFor(c, o, OpReq::kAddTo));
    if (o < want.size()) a.FillUniform(-1, 1), before.push_back(ToValues(a));
    acc.push_back(a);
  }
  Invoke(c.op, ToArrays<float>(in, c), c.attrs,
         {.outputs = acc, .req = reqs, .is_train = c.is_train});
  for (size_t o = 0; o < want.size(); ++o) {
    Values expected = want[o];
    for (size_t k = 0; k < expected.size(); ++k) expected[k] += before[o][k];
    ExpectNear(ToValues(acc[o]), expected, c.tolerance,
               Name(c) + " forward req=add output " + std::to_string(o));
  }
}

// L = sum over outputs of sum(w * out), in float64.
double Loss(const OpCase& c, const Inputs& in, const Outputs& weights) {
  std::vector<NDArray> outputs =
      Invoke(c.op, ToArrays<double>(in, c), c.attrs, {.is_train = c.is_train});
  double loss = 0;
  for (size_t o = 0; o < Visible(c); ++o) {
    Values v = ToValues(outputs[o]);
    for (size_t k = 0; k < v.size(); ++k) loss += weights[o][k] * v[k];
  }
  return loss;
}

Values NumericGradient(const OpCase& c, Inputs in, const Outputs& weights, size_t input) {
  const double eps = 1e-6;
  Values grad(in[input].size());
  for (size_t k = 0; k < grad.size(); ++k) {
    const double x = in[input][k];
    in[input][k] = x + eps;
    const double plus = Loss(c, in, weights);
    in[input][k] = x - eps;
    const double minus = Loss(c, in, weights);
    in[input][k] = x;
    grad[k] = (plus - minus) / (2 * eps);
  }
  return grad;
}

bool HasGradient(const OpCase& c, size_t i) {
  for (int j : c.no_gradient_inputs)
    if (static_cast<size_t>(j) == i) return false;
  return true;
}

void CheckGradient(const OpCase& c, const Inputs& in) {
  const Op& op = GetOp(c.op);
  const Attrs attrs = ParseAttrs(op, c.attrs);
  std::vector<NDArray> inputs = ToArrays<double>(in, c);
  std::vector<NDArray> outputs = Invoke(op, attrs, inputs, {.is_train = c.is_train});
  std::mt19937_64 rng(7);
  Outputs weights;
  std::vector<NDArray> out_grads;
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (o >= Visible(c)) {
      out_grads.push_back(Zeros(outputs[o]));
      continue;
    }
    weights.push_back(DefaultInit(rng, static_cast<size_t>(outputs[o].size())));
    out_grads.push_back(
        ArrayOf(weights.back(), outputs[o].shape(), outputs[o].dtype(), Device::Cpu()));
  }
  for (OpReq req : {OpReq::kWrite, OpReq::kAddTo}) {
    std::vector<NDArray> grads;
    std::vector<OpReq> reqs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      NDArray g(inputs[i].shape(), Device::Cpu(), DType::kFloat64);
      g.Fill(req == OpReq::kAddTo ? 0.5 : 0.0);
      grads.push_back(g);
      reqs.push_back(HasGradient(c, i) ? req : OpReq::kNull);
    }
    InvokeBackward(op, attrs, inputs, outputs, out_grads, grads, reqs, c.is_train);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!HasGradient(c, i)) continue;
      Values want = NumericGradient(c, in, weights, i);
      if (req == OpReq::kAddTo)
        for (double& w : want) w += 0.5;
      ExpectNear(ToValues(grads[i]), want, c.gradient_tolerance,
                 Name(c) + (req == OpReq::kAddTo ? " gradient req=add" : " gradient req=write") +
                     " of input " + std::to_string(i));
    }
  }
}

// ---- On a GPU: against the reference and the CPU, float32 --------------------------------------

constexpr uint64_t kSeed = 20261130;

// The op on `device` with req `req`; for kAddTo the outputs start from `start`.
std::vector<Values> ForwardOn(const OpCase& c, const Inputs& in, Device device, OpReq req,
                              const Outputs& start) {
  SeedRandom(kSeed);
  std::vector<NDArray> outputs;
  if (req == OpReq::kAddTo) {
    const Op& op = GetOp(c.op);
    const Attrs attrs = ParseAttrs(op, c.attrs);
    const std::vector<Shape> shapes = InferShapes(op, attrs, c.input_shapes, device.type);
    const std::vector<DType> types =
        InferTypes(op, attrs, std::vector<DType>(c.input_shapes.size(), DType::kFloat32));
    std::vector<OpReq> reqs;
    for (size_t o = 0; o < shapes.size(); ++o) {
      outputs.push_back(o < start.size() ? ArrayOf(start[o], shapes[o], types[o], device)
                                         : NDArray(shapes[o], device, types[o]));
      reqs.push_back(RequestFor(c, o, req));
    }
    Invoke(c.op, ToArrays<float>(in, c, device), c.attrs,
           {.outputs = outputs, .req = reqs, .is_train = c.is_train});
  } else {
    outputs = Invoke(c.op, ToArrays<float>(in, c, device), c.attrs, {.is_train = c.is_train});
  }
  std::vector<Values> values;
  for (size_t o = 0; o < Visible(c); ++o) values.push_back(ToValues(outputs[o]));
  return values;
}

void CheckForwardOnGpu(const OpCase& c, const Inputs& in, Device gpu) {
  Inputs rounded = in;
  for (Values& v : rounded)
    for (double& x : v) x = static_cast<float>(x);
  const Outputs want = c.reference(rounded);
  for (OpReq req : {OpReq::kWrite, OpReq::kAddTo}) {
    Outputs start;
    std::mt19937_64 rng(11);
    for (const Values& w : want) start.push_back(DefaultInit(rng, w.size()));
    for (Values& v : start)
      for (double& x : v) x = static_cast<float>(x);
    const std::vector<Values> cpu = ForwardOn(c, in, Device::Cpu(), req, start);
    const std::vector<Values> got = ForwardOn(c, in, gpu, req, start);
    ASSERT_EQ(got.size(), want.size()) << Name(c) << ": output count";
    const std::string what = Name(c) + (req == OpReq::kAddTo ? " forward req=add" : " forward") +
                             " on " + gpu.ToString();
    for (size_t o = 0; o < got.size(); ++o) {
      Values expected = want[o];
      if (req == OpReq::kAddTo)
        for (size_t k = 0; k < expected.size(); ++k) expected[k] += start[o][k];
      ExpectNear(got[o], expected, c.tolerance,
                 what + " output " + std::to_string(o) + " vs reference");
      ExpectNear(got[o], cpu[o], kGpuTolerance, what + " output " + std::to_string(o) + " vs CPU");
    }
  }
}

// The input gradients on `device` (float32) for output gradients `weights`, with request `req`
// (kAddTo starts from 0.5).
std::vector<Values> GradientOn(const OpCase& c, const Inputs& in, const Outputs& weights,
                               Device device, OpReq req) {
  const Op& op = GetOp(c.op);
  const Attrs attrs = ParseAttrs(op, c.attrs);
  std::vector<NDArray> inputs = ToArrays<float>(in, c, device);
  SeedRandom(kSeed);
  std::vector<NDArray> outputs = Invoke(op, attrs, inputs, {.is_train = c.is_train});
  std::vector<NDArray> out_grads, grads;
  for (size_t o = 0; o < outputs.size(); ++o) {
    out_grads.push_back(o < weights.size()
                            ? ArrayOf(weights[o], outputs[o].shape(), outputs[o].dtype(), device)
                            : Zeros(outputs[o]));
  }
  std::vector<OpReq> reqs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    grads.emplace_back(inputs[i].shape(), device);
    grads.back().Fill(req == OpReq::kAddTo ? 0.5 : 0.0);
    reqs.push_back(HasGradient(c, i) ? req : OpReq::kNull);
  }
  InvokeBackward(op, attrs, inputs, outputs, out_grads, grads, reqs, c.is_train);
  std::vector<Values> values;
  for (const NDArray& g : grads) values.push_back(ToValues(g));
  return values;
}

void CheckGradientOnGpu(const OpCase& c, const Inputs& in, Device gpu) {
  std::mt19937_64 rng(7);
  Outputs weights;
  const std::vector<Shape> shapes =
      InferShapes(GetOp(c.op), ParseAttrs(GetOp(c.op), c.attrs), c.input_shapes);
  for (size_t o = 0; o < Visible(c); ++o)
    weights.push_back(DefaultInit(rng, static_cast<size_t>(shapes[o].Size())));
  for (OpReq req : {OpReq::kWrite, OpReq::kAddTo}) {
    const std::vector<Values> cpu = GradientOn(c, in, weights, Device::Cpu(), req);
    const std::vector<Values> got = GradientOn(c, in, weights, gpu, req);
    for (size_t i = 0; i < got.size(); ++i) {
      if (!HasGradient(c, i)) continue;
      ExpectNear(got[i], cpu[i], kGpuTolerance,
                 Name(c) + (req == OpReq::kAddTo ? " gradient req=add" : " gradient req=write") +
                     " of input " + std::to_string(i) + " on " + gpu.ToString() + " vs CPU");
    }
  }
}

// ---- Coverage -------------------------------------------------------------------------------

std::set<std::string>& Covered() {
  static auto* const covered =
      new std::set<std::string>;  // the tests of one binary run on one thread
  return *covered;
}

// The ops the backward nodes of c's gradient rule call: what InvokeBackward ran for it.
void CoverGradientOps(const OpCase& c) {
  const Op& op = GetOp(c.op);
  if (!op.gradient) return;
  const Attrs attrs = ParseAttrs(op, c.attrs);
  GradBuilder g(static_cast<int>(c.input_shapes.size()), NumOutputs(op, attrs));
  op.gradient(attrs, g);
  for (const GradNode& node : g.nodes()) Covered().insert(node.op);
}

}  // namespace

void RunOpCase(const OpCase& c) {
  SCOPED_TRACE(Name(c));
  const Inputs in = MakeInputs(c);
  if (TestDevice().is_gpu()) {
    CheckForwardOnGpu(c, in, TestDevice());
    Covered().insert(c.op);
    if (::testing::Test::HasFatalFailure() || !c.check_gradient) return;
    CheckGradientOnGpu(c, in, TestDevice());
    CoverGradientOps(c);
    return;
  }
  CheckForward(c, in);
  Covered().insert(c.op);
  if (::testing::Test::HasFatalFailure()) return;
  if (c.check_gradient) {
    ASSERT_TRUE(GetOp(c.op).gradient != nullptr) << c.op << " has no gradient rule";
    CheckGradient(c, in);
    CoverGradientOps(c);
  }
}

const std::set<std::string>& CoveredOps() { return Covered(); }

void MarkCovered(const std::string& op) { Covered().insert(op); }

void ExpectOpError(const std::string& op, const AttrMap& attrs,
                   const std::vector<Shape>& input_shapes, const std::vector<std::string>& parts) {
  std::string message = "<no error>";
  try {
    std::vector<NDArray> inputs;
    const std::vector<Device> devices = InputDevices(op, attrs, input_shapes.size(), TestDevice());
    for (size_t i = 0; i < input_shapes.size(); ++i) {
      NDArray a(input_shapes[i], devices[i]);
      a.Fill(0);
      inputs.push_back(a);
    }
    for (const NDArray& out : Invoke(op, inputs, attrs)) out.WaitToRead();
  } catch (const Error& e) {
    message = e.what();
  }
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "op '" << op << "': error message lacks '" << part << "':\n"
        << message;
  }
}

NDArray ArrayOf(const Values& v, const Shape& shape, DType dtype, Device device) {
  if (dtype == DType::kFloat64) return NDArray::FromVector(v, shape, device);
  const NDArray f = NDArray::FromVector(std::vector<float>(v.begin(), v.end()), shape);
  if (dtype == DType::kFloat32) return f.Copy(device);
  // float16 is cast on `device` (the CPU has no float16), the others on the CPU.
  const bool half = dtype == DType::kFloat16;
  const NDArray cast =
      Invoke("Cast", {half ? f.Copy(device) : f}, {{"dtype", DTypeName(dtype).data()}})[0];
  return half ? cast : cast.Copy(device);
}

Values ValuesOf(const NDArray& a) {
  // float16 is cast to float32 on its own device (the CPU has no float16), the others on the CPU.
  const bool half = a.dtype() == DType::kFloat16;
  NDArray cpu = (half ? Invoke("Cast", {a}, {{"dtype", "float32"}})[0] : a).Copy(Device::Cpu());
  if (cpu.dtype() == DType::kFloat64) return cpu.ToVector<double>();
  if (cpu.dtype() != DType::kFloat32) cpu = Invoke("Cast", {cpu}, {{"dtype", "float32"}})[0];
  const std::vector<float> f = cpu.ToVector<float>();
  return Values(f.begin(), f.end());
}

Values Uniform(int64_t n, uint64_t seed, double low, double high) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(low, high);
  Values v(static_cast<size_t>(n));
  for (double& x : v) x = static_cast<float>(u(rng));  // exact in float32
  return v;
}

Values Bf16Exact(const Values& v) {
  return ValuesOf(
      ArrayOf(v, Shape{static_cast<int64_t>(v.size())}, DType::kBFloat16, Device::Cpu()));
}

void ExpectNear(const Values& got, const Values& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;  // equal infinities too (an lse of -inf)
    ASSERT_LE(std::abs(got[i] - want[i]), tol * (1 + std::abs(want[i])))
        << what << ": element " << i << " is " << got[i] << ", expected " << want[i];
  }
}

std::vector<DType> TestFloatTypes() {
  if (TestDevice().is_gpu()) return {DType::kFloat32};
  return {DType::kFloat32, DType::kFloat64};
}

void UniformAwayFromZero(int, Values& v) {
  for (double& x : v) x = (x < 0 ? -0.2 : 0.2) + 0.8 * x;
}

void Positive(int, Values& v) {
  for (double& x : v) x = 1.1 + 0.9 * x;
}

std::function<void(int, Values&)> ClassIndices(int which, int classes) {
  return [which, classes](int i, Values& v) {
    if (i != which) return;
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<double>((k * 7 + 3) % classes);
  };
}

}  // namespace weft::testing
