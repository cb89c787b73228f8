// Every pointwise op on the values where floating point is easy to get wrong: NaN, +-inf, +-0, the
// smallest and a middle denormal, the smallest normal, the largest finite values, and a few
// ordinary ones, as every combination of its inputs. "Every" is the registry's list: each op with
// Op::pointwise set (forward and backward, scalar forms with scalars 0, -0, +-inf, NaN, a denormal
// and ordinary ones, add_n, the optimizer updates), so an op added later is covered without
// touching this file, and Activation with each act_type. Built twice (tests/op_test_util.h):
//
// - On the CPU, each op's result must equal, bit for bit, its functor (ops/math/) evaluated here
//   in a plain loop. The op's loops are vectorized at -O3 with -fno-trapping-math and this file's
//   are not, so this checks that the vectorized code keeps NaN, -0 and denormals as the functor
//   says. Broadcast gradients are sums; the loop here adds in the CPU's stated order (the
//   output's row-major positions, from -0).
// - On a GPU, each op's result must equal the CPU's result of the same op, bit for bit, in float32
//   and float64, and in bfloat16 against the CPU's float32 result rounded to bfloat16, except
//   where the functor calls exp, log, log1p or tanh (kLibraryUlps says why and how far). NaN-ness,
//   infinities and zeros (with their sign) must match exactly everywhere. Broadcast gradients
//   that sum several terms are left out there: a GPU sums in another order (tree reductions), so
//   only sums of one term are compared (tests/gpu_pointwise_ops_test.cc covers the others within
//   a tolerance).
//
// "Bit for bit" holds NaNs equal whatever their sign and payload, which IEEE 754 leaves open and
// which differ between x86 (a negative default NaN) and CUDA (a positive canonical one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "core/bfloat16.h"
#include "ops/elementwise/binary_ops.h"
#include "ops/elementwise/unary_ops.h"
#include "ops/math/binary.h"
#include "ops/math/optimizer.h"
#include "ops/math/unary.h"
#include "ops/op.h"
#include "ops/optimizer/update_ops.h"
#include "storage/ndarray.h"
#include "tests/op_test_util.h"
#include "weft/imperative.h"

namespace weft {
namespace {

using testing::TestDevice;

template <typename T>
using Arrays = std::vector<std::vector<T>>;

// ---- The inputs ---------------------------------------------------------------------------------

// The values every input takes, for T = float or double.
template <typename T>
std::vector<T> SpecialValues() {
  using L = std::numeric_limits<T>;
  return {L::quiet_NaN(),
          L::infinity(),
          -L::infinity(),
          T(0),
          -T(0),  // 3, 4
          L::denorm_min(),
          -L::denorm_min(),  // 5, 6: the smallest denormal
          T(0.75) * L::min(),
          -T(0.75) * L::min(),  // 7, 8: a middle denormal
          L::min(),
          L::max(),
          L::lowest(),  // 9, 10, 11
          T(1),
          T(-1),
          T(0.5),
          T(-0.5),
          T(3),
          T(30),
          T(-30)};
}

// The same values as bfloat16 holds them (its own denormals and largest finite), as float.
std::vector<float> Bf16Values() {
  auto bits = [](uint16_t b) { return BFloat16{b}.ToFloat(); };
  std::vector<float> v = SpecialValues<float>();
  v[5] = bits(0x0001), v[6] = bits(0x8001);    // the smallest denormal
  v[7] = bits(0x0060), v[8] = bits(0x8060);    // 0.75 * the smallest normal
  v[10] = bits(0x7f7f), v[11] = bits(0xff7f);  // the largest finite
  return v;
}

// `arity` arrays holding every arity-tuple of `values` (array k holds component k).
template <typename T>
Arrays<T> AllTuples(const std::vector<T>& values, int arity) {
  size_t n = 1;
  for (int k = 0; k < arity; ++k) n *= values.size();
  Arrays<T> out(arity, std::vector<T>(n));
  for (size_t i = 0; i < n; ++i) {
    size_t rest = i;
    for (int k = arity - 1; k >= 0; --k, rest /= values.size())
      out[k][i] = values[rest % values.size()];
  }
  return out;
}

// ---- The calls ----------------------------------------------------------------------------------

// One call of an op: its attributes, its input shapes, and the functor it applies in what way.
struct Call {
  std::string op;
  AttrMap attrs;
  PointwiseKind kind;
  std::string functor;
  std::vector<Shape> shapes;
  int arity;                // inputs are every arity-tuple of the values, one component per input
  bool sums_terms = false;  // a broadcast gradient that sums several terms (CPU only)
  std::string What() const {
    std::string s = op;
    for (const auto& [k, v] : attrs) s += " " + k + "=" + v;
    for (const Shape& shape : shapes) s += " " + shape.ToString();
    return s;
  }
};

// The calls of a binary op (every pair of n values, as arrays of one shape and broadcast) or of its
// backward op (every triple (dy, lhs, rhs), as arrays of one shape and broadcast with one term per
// gradient; and a broadcast whose gradients sum n terms).
std::vector<Call> BinaryCalls(const std::string& op, PointwiseKind kind, const std::string& functor,
                              int64_t n) {
  const int64_t n2 = n * n, n3 = n2 * n;
  if (kind == PointwiseKind::kBinary) {
    return {{op, {}, kind, functor, {Shape{n2}, Shape{n2}}, 2},
            {op, {}, kind, functor, {Shape{n, 1}, Shape{1, n}}, 1}};  // broadcast: every pair again
  }
  return {{op, {}, kind, functor, {Shape{n3}, Shape{n3}, Shape{n3}}, 3},
          // lhs lacks rhs's leading axis of extent 1: the broadcast path, one term per gradient
          {op, {}, kind, functor, {Shape{1, n3}, Shape{n3}, Shape{1, n3}}, 3},
          {op, {}, kind, functor, {Shape{n, n}, Shape{n, 1}, Shape{1, n}}, 1, /*sums_terms=*/true}};
}

// Scalars of the *_scalar ops, as attribute text (1e-40 is a denormal in float32).
const char* const kScalars[] = {"0", "-0", "inf", "-inf", "nan", "1e-40", "1", "-2.5"};

std::vector<AttrMap> ScalarAttrs() {
  std::vector<AttrMap> attrs;
  for (const char* s : kScalars) attrs.push_back({{"scalar", s}});
  return attrs;
}

// clip's bounds (a_min <= a_max), as attribute text.
std::vector<AttrMap> ClipAttrs() {
  const std::pair<const char*, const char*> bounds[] = {
      {"0", "6"}, {"-0", "0"}, {"-inf", "inf"}, {"1e-40", "1"}, {"-2.5", "-2.5"}, {"-inf", "-1"}};
  std::vector<AttrMap> attrs;
  for (const auto& [lo, hi] : bounds) attrs.push_back({{"a_min", lo}, {"a_max", hi}});
  return attrs;
}

int64_t Power(int64_t n, int k) {
  int64_t p = 1;
  while (k-- > 0) p *= n;
  return p;
}

// The attributes each update is called with: plain, and with rescaling, clipping and weight decay.
std::vector<AttrMap> UpdateCallAttrs(const std::string& op) {
  AttrMap plain = {{"lr", "0.1"}};
  AttrMap all = {{"lr", "0.1"}, {"wd", "0.01"}, {"rescale_grad", "0.5"}, {"clip_gradient", "0.6"}};
  if (op == "sgd_mom_update") plain["momentum"] = all["momentum"] = "0.9";
  if (op == "adam_update") all["beta1"] = "0.8", all["beta2"] = "0.99", all["epsilon"] = "1e-6";
  return {plain, all};
}

// Whether ops applying `functor` take the attribute `scalar` (unary_ops.h says).
bool HasScalar(const std::string& functor) {
#define WEFT_SCALAR_FUNCTOR(name, functor, description, has_scalar) \
  {"weft::fn::" #functor, has_scalar},
  static const std::map<std::string, bool> table = {WEFT_UNARY_OPS(WEFT_SCALAR_FUNCTOR)};
#undef WEFT_SCALAR_FUNCTOR
  auto it = table.find(functor);
  return it != table.end() && it->second;
}

// The calls of one pointwise op of the registry.
std::vector<Call> CallsOf(const Op& op, int64_t n) {
  const PointwiseFn& pw = op.pointwise;
  std::vector<Call> calls;
  if (pw.functor_of) return calls;  // Activation: AllCalls adds one call per act_type
  switch (pw.kind) {
    case PointwiseKind::kUnary:
    case PointwiseKind::kUnaryBackward: {
      // the backward: dy, and x or y if its functor's Grad reads one
      const std::vector<AttrMap> attrs = HasScalar(pw.functor) ? ScalarAttrs()
                                         : pw.functor == "weft::fn::Clip"
                                             ? ClipAttrs()
                                             : std::vector<AttrMap>{{}};
      for (const AttrMap& a : attrs) {
        const int arity = pw.kind == PointwiseKind::kUnary ? 1 : NumInputs(op, ParseAttrs(op, a));
        calls.push_back({op.name, a, pw.kind, pw.functor,
                         std::vector<Shape>(arity, Shape{Power(n, arity)}), arity});
      }
      return calls;
    }
    case PointwiseKind::kBinary:
    case PointwiseKind::kBinaryBackward:
      return BinaryCalls(op.name, pw.kind, pw.functor, n);
    case PointwiseKind::kAddN:
      return {
          {op.name, {{"num_args", "2"}}, pw.kind, "", {Shape{n * n}, Shape{n * n}}, 2},
          {op.name, {{"num_args", "3"}}, pw.kind, "", std::vector<Shape>(3, Shape{n * n * n}), 3}};
    case PointwiseKind::kUpdate:
      for (const AttrMap& attrs : UpdateCallAttrs(op.name)) {
        const int arity = NumInputs(op, ParseAttrs(op, attrs));
        calls.push_back({op.name, attrs, pw.kind, pw.functor,
                         std::vector<Shape>(arity, Shape{Power(n, arity)}), arity});
      }
      return calls;
    case PointwiseKind::kTernary:  // where: a selection (ops_elementwise_test checks it)
    case PointwiseKind::kCast:     // conversions and views: no arithmetic to get wrong
    case PointwiseKind::kReshape:
    case PointwiseKind::kNone:
      break;
  }
  return calls;
}

// Every call: the registry's pointwise ops, and Activation (whose functor act_type picks).
std::vector<Call> AllCalls(int64_t n) {
  std::vector<Call> calls;
  for (const std::string& name : ListOps()) {
    for (Call& c : CallsOf(GetOp(name), n)) calls.push_back(std::move(c));
  }
  const Op& backward = GetOp("_backward_Activation");
#define WEFT_ACTIVATION_CALLS(value, name, functor)                                    \
  calls.push_back({"Activation",                                                       \
                   {{"act_type", name}},                                               \
                   PointwiseKind::kUnary,                                              \
                   "weft::fn::" #functor,                                              \
                   {Shape{n}},                                                         \
                   1});                                                                \
  {                                                                                    \
    const int arity = NumInputs(backward, ParseAttrs(backward, {{"act_type", name}})); \
    calls.push_back({"_backward_Activation",                                           \
                     {{"act_type", name}},                                             \
                     PointwiseKind::kUnaryBackward,                                    \
                     "weft::fn::" #functor,                                            \
                     std::vector<Shape>(arity, Shape{Power(n, arity)}),                \
                     arity});                                                          \
  }
  WEFT_ACTIVATIONS(WEFT_ACTIVATION_CALLS)
#undef WEFT_ACTIVATION_CALLS
  return calls;
}

// The inputs of `c` from `values`: every arity-tuple, laid out in the input shapes. The broadcast
// cases of arity 1 give each operand the values (lhs (n, 1) and rhs (1, n) make every pair) and
// a summed gradient an output gradient of ones (its terms are then the functor's DL and DR).
template <typename T>
Arrays<T> InputsOf(const Call& c, const std::vector<T>& values) {
  if (c.arity > 1 || c.shapes.size() == 1) return AllTuples(values, c.arity);
  Arrays<T> in;
  for (const Shape& s : c.shapes) in.push_back(std::vector<T>(s.Size(), T(1)));
  for (size_t k = c.sums_terms ? 1 : 0; k < in.size(); ++k) in[k] = values;
  return in;
}

// ---- The functors, evaluated here
// -----------------------------------------------------------------

// The element of `operand` (its shape right-aligned to two axes, broadcast where its extent is 1)
// at position (i, j) of the output's two axes.
int64_t At(const Shape& operand, int64_t i, int64_t j) {
  const int64_t rows = operand.ndim() == 2 ? operand[0] : 1, cols = operand[operand.ndim() - 1];
  return (rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j);
}

// The output's two axes, of operands of at most two.
std::pair<int64_t, int64_t> OutputAxes(const Shape& a, const Shape& b) {
  auto rows = [](const Shape& s) { return s.ndim() == 2 ? s[0] : 1; };
  return {std::max(rows(a), rows(b)), std::max(a[a.ndim() - 1], b[b.ndim() - 1])};
}

// The scalars the call's functor takes (none, `scalar`, clip's bounds).
PointwiseScalars ScalarsOf(const Call& c) {
  const Op& op = GetOp(c.op);
  return op.pointwise.Scalars(ParseAttrs(op, c.attrs));
}

// Each reference fills `out` with the call's outputs from `in`, and updates `in` as the op does.
template <typename F, typename T>
void UnaryReference(const Call& c, Arrays<T>& in, Arrays<T>& out) {
  const PointwiseScalars scalars = ScalarsOf(c);
  const T s = static_cast<T>(scalars.values[0]), t = static_cast<T>(scalars.values[1]);
  out = {std::vector<T>(in[0].size())};
  for (size_t i = 0; i < in[0].size(); ++i) {
    out[0][i] = c.kind == PointwiseKind::kUnary ? fn::ForwardOf<F>(in[0][i], s, t)
                                                : fn::BackwardOf<F>(in[0][i], in.back()[i], s, t);
  }
}

// Gradients are sums from -0 over the output's positions in row-major order (one term each
// without broadcasting).
template <typename F, typename T>
void BinaryReference(const Call& c, Arrays<T>& in, Arrays<T>& out) {
  const bool forward = c.kind == PointwiseKind::kBinary;
  const Shape &ls = c.shapes[forward ? 0 : 1], &rs = c.shapes[forward ? 1 : 2];
  const Arrays<T>& ops = forward ? in : Arrays<T>{in[1], in[2]};
  const auto [rows, cols] = OutputAxes(ls, rs);
  if (forward) out = {std::vector<T>(rows * cols)};
  if (!forward) out = {std::vector<T>(ls.Size(), T(-0.0)), std::vector<T>(rs.Size(), T(-0.0))};
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t a = At(ls, i, j), b = At(rs, i, j);
      const T l = ops[0][a], r = ops[1][b];
      if (forward) {
        out[0][i * cols + j] = F::Fwd(l, r);
        continue;
      }
      const T g = in[0][i * cols + j];
      out[0][a] += g * F::DL(l, r);
      out[1][b] += g * F::DR(l, r);
    }
  }
}

template <typename F, typename T>
void UpdateReference(const Call& c, Arrays<T>& in, Arrays<T>& out) {
  const UpdateParam p = ParseAttrs(GetOp(c.op), c.attrs).Get<UpdateParam>();
  out = {std::vector<T>(in[0].size())};
  for (size_t i = 0; i < in[0].size(); ++i) {
    T state[fn::kMaxUpdateStates] = {};
    for (int k = 0; k < F::kStates; ++k) state[k] = in[2 + k][i];
    out[0][i] = F::Step(p, in[0][i], in[1][i], state);
    for (int k = 0; k < F::kStates; ++k) in[2 + k][i] = state[k];
  }
}

// add_n: the sum in input order, from -0.
template <typename T>
void AddNReference(const Call&, Arrays<T>& in, Arrays<T>& out) {
  out = {std::vector<T>(in[0].size(), T(-0.0))};
  for (const std::vector<T>& x : in) {
    for (size_t i = 0; i < x.size(); ++i) out[0][i] += x[i];
  }
}

template <typename T>
using Reference = void (*)(const Call&, Arrays<T>&, Arrays<T>&);
struct References {
  Reference<float> f32;
  Reference<double> f64;
};

// Every functor of ops/math, by the name ops give in Op::pointwise. An op whose functor is not
// here fails the test: add its family's table (or the functor) below.
const std::map<std::string, References>& Functors() {
#define WEFT_REFERENCE(F, Kind) \
  {"weft::fn::" #F, {&Kind##Reference<fn::F, float>, &Kind##Reference<fn::F, double>}},
#define WEFT_UNARY_REFERENCE(name, functor, description, has_scalar) WEFT_REFERENCE(functor, Unary)
#define WEFT_EXTRA_REFERENCE(functor) WEFT_REFERENCE(functor, Unary)
#define WEFT_BINARY_REFERENCE(name, functor, description) WEFT_REFERENCE(functor, Binary)
#define WEFT_UPDATE_REFERENCE(name, functor, description) WEFT_REFERENCE(functor, Update)
  static const std::map<std::string, References> functors = {
      WEFT_UNARY_OPS(WEFT_UNARY_REFERENCE) WEFT_UNARY_EXTRA_FUNCTORS(WEFT_EXTRA_REFERENCE)
          WEFT_REFERENCE(Identity, Unary)  // _copy
      WEFT_REFERENCE(Clip, Unary) WEFT_BINARY_OPS(WEFT_BINARY_REFERENCE)
          WEFT_UPDATE_OPS(WEFT_UPDATE_REFERENCE)};
#undef WEFT_UPDATE_REFERENCE
#undef WEFT_BINARY_REFERENCE
#undef WEFT_EXTRA_REFERENCE
#undef WEFT_UNARY_REFERENCE
#undef WEFT_REFERENCE
  return functors;
}

// The reference of `c` in T, or null when its functor is unknown.
template <typename T>
Reference<T> ReferenceOf(const Call& c) {
  if (c.kind == PointwiseKind::kAddN) return &AddNReference<T>;
  auto it = Functors().find(c.functor);
  if (it == Functors().end()) return nullptr;
  if constexpr (std::is_same_v<T, float>) {
    return it->second.f32;
  } else {
    return it->second.f64;
  }
}

// ---- Running and comparing
// ------------------------------------------------------------------------

// Runs `c` on `device` in T's dtype and returns its outputs; `in` holds the inputs and, after, the
// inputs as the op left them (updates change their state).
template <typename T>
Arrays<T> RunOp(const Call& c, Device device, Arrays<T>& in) {
  const Op& op = GetOp(c.op);
  std::vector<NDArray> arrays;
  for (size_t k = 0; k < in.size(); ++k)
    arrays.push_back(NDArray::FromVector(in[k], c.shapes[k], device));
  Arrays<T> out;
  for (const NDArray& y : Invoke(op, ParseAttrs(op, c.attrs), arrays))
    out.push_back(y.ToVector<T>());
  for (size_t k = 0; k < in.size(); ++k) in[k] = arrays[k].ToVector<T>();
  return out;
}

NDArray CastTo(const NDArray& a, const char* dtype) {
  return Invoke("Cast", {a}, {{"dtype", dtype}})[0];
}

// The same in bfloat16 on `gpu`, from and to bfloat16-exact floats.
Arrays<float> RunOpBf16(const Call& c, Device gpu, Arrays<float>& in) {
  const Op& op = GetOp(c.op);
  std::vector<NDArray> arrays;
  for (size_t k = 0; k < in.size(); ++k) {
    arrays.push_back(CastTo(NDArray::FromVector(in[k], c.shapes[k]), "bfloat16").Copy(gpu));
  }
  auto to_float = [](const NDArray& a) {
    return CastTo(a.Copy(Device::Cpu()), "float32").ToVector<float>();
  };
  Arrays<float> out;
  for (const NDArray& y : Invoke(op, ParseAttrs(op, c.attrs), arrays)) out.push_back(to_float(y));
  for (size_t k = 0; k < in.size(); ++k) in[k] = to_float(arrays[k]);
  return out;
}

template <typename T>
std::string Show(T x) {
  char text[64];
  std::snprintf(text, sizeof(text), "%a (%.9g)", static_cast<double>(x), static_cast<double>(x));
  return text;
}

// x's bits as an integer that orders like x (-0 and +0 both 0).
template <typename T>
__int128 Ordered(T x) {
  using Bits = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  Bits b;
  std::memcpy(&b, &x, sizeof(b));
  return b < 0 ? static_cast<__int128>(std::numeric_limits<Bits>::min()) - b
               : static_cast<__int128>(b);
}

// `got` is `want` within `ulps` (0: bit for bit); NaN-ness, infinities and zeros (signed) exactly.
template <typename T>
bool Matches(T got, T want, int ulps) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (std::memcmp(&got, &want, sizeof(T)) == 0) return true;
  if (ulps == 0 || std::isinf(got) || std::isinf(want) || got == 0 || want == 0) return false;
  const __int128 d = Ordered(got) - Ordered(want);
  return (d < 0 ? -d : d) <= ulps;
}

// Adds a failure for the first element of `got` that does not match `want`, with the inputs there
// (where the arrays have one size).
template <typename T>
void ExpectMatch(const Arrays<T>& got, const Arrays<T>& want, const Arrays<T>& inputs, int ulps,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t a = 0; a < got.size(); ++a) {
    ASSERT_EQ(got[a].size(), want[a].size()) << what << " " << a;
    for (size_t i = 0; i < got[a].size(); ++i) {
      if (Matches(got[a][i], want[a][i], ulps)) continue;
      std::string at;
      for (const std::vector<T>& x : inputs)
        at += x.size() == got[a].size() ? " " + Show(x[i]) : " (broadcast)";
      ADD_FAILURE() << what << " " << a << " element " << i << ": got " << Show(got[a][i])
                    << ", expected " << Show(want[a][i])
                    << (ulps > 0 ? " within " + std::to_string(ulps) + " ulps" : "") << "; inputs"
                    << at;
      return;
    }
  }
}

template <typename T>
const char* TypeName() {
  return std::is_same_v<T, float> ? "float32" : "float64";
}

// ---- The checks
// -----------------------------------------------------------------------------------

template <typename T>
void ExpectCpuMatchesFunctor(const Call& c) {
  const Reference<T> reference = ReferenceOf<T>(c);
  ASSERT_NE(reference, nullptr) << c.op << " names the functor " << c.functor
                                << ", which this test does not know: add it to Functors()";
  const Arrays<T> inputs = InputsOf(c, SpecialValues<T>());
  Arrays<T> in = inputs, want_in = inputs, want;
  const Arrays<T> got = RunOp(c, Device::Cpu(), in);
  reference(c, want_in, want);
  const std::string what = c.What() + " " + TypeName<T>() + " on the CPU vs its functor:";
  ExpectMatch(got, want, inputs, 0, what + " output");
  ExpectMatch(in, want_in, inputs, 0, what + " input after the call");
}

// The math library's exp, log, log1p and tanh (ops/math/base.h) are not correctly rounded, and
// CUDA's differ from glibc's in the last bits. Their documented maximum errors, in ulps of the
// correctly rounded result: CUDA (Programming Guide, appendix "Mathematical Functions") expf 2,
// logf 1, log1pf 1, tanhf 2, and exp, log, log1p, tanh 1 each in double; glibc on x86-64
// (sysdeps/x86_64/fpu/libm-test-ulps) exp 1, log 1, log1p at most 1, tanh 2, in float and double,
// and the host's own float exp 1 and tanh 1.5 (ops/math/base.h; tests/math_exp_test.cc,
// math_tanh_test.cc). So one call differs
// by at most 4 ulps between the devices. The arithmetic after the call can
// magnify that where it cancels: gelu's 1 + tanh(u) is 0.32 at x = -1 (about 3 times), and
// softrelu calls two of the functions; with the roundings around them, 16 ulps covers every
// input here. (Inputs where gelu cancels much worse, x in [-9, -1.5] where 1 + tanh(u) keeps only
// a few bits on either device, are not among the values; ordinary values in [-2, 2] are compared
// within a relative tolerance by tests/gpu_pointwise_ops_test.cc.)
constexpr int kLibraryUlps = 16;

// Whether the member the call applies calls one of those functions.
bool CallsMathLibrary(const Call& c) {
  static const std::set<std::string> forward = {
      "weft::fn::Exp",      "weft::fn::Log", "weft::fn::Sigmoid", "weft::fn::Tanh",
      "weft::fn::SoftRelu", "weft::fn::Erf", "weft::fn::Gelu",    "weft::fn::GeluTanh"};
  static const std::set<std::string> gradient = {"weft::fn::SoftRelu", "weft::fn::Erf",
                                                 "weft::fn::Gelu", "weft::fn::GeluTanh"};
  if (c.kind == PointwiseKind::kUnary) return forward.count(c.functor) > 0;
  return c.kind == PointwiseKind::kUnaryBackward && gradient.count(c.functor) > 0;
}

template <typename T>
void ExpectGpuMatchesCpu(const Call& c) {
  const Arrays<T> inputs = InputsOf(c, SpecialValues<T>());
  Arrays<T> gpu_in = inputs, cpu_in = inputs;
  const Arrays<T> got = RunOp(c, TestDevice(), gpu_in);
  const Arrays<T> want = RunOp(c, Device::Cpu(), cpu_in);
  const int ulps = CallsMathLibrary(c) ? kLibraryUlps : 0;
  const std::string what =
      c.What() + " " + TypeName<T>() + " on " + TestDevice().ToString() + " vs the CPU:";
  ExpectMatch(got, want, inputs, ulps, what + " output");
  ExpectMatch(gpu_in, cpu_in, inputs, ulps, what + " input after the call");
}

// bfloat16 on the GPU: arithmetic in float, rounded once to bfloat16, so it must equal the CPU's
// float32 result rounded to bfloat16; where the math library differs by a few float ulps, the
// rounding can fall either way: one bfloat16 ulp (2^16 float ulps).
void ExpectGpuBf16MatchesCpu(const Call& c) {
  const Arrays<float> inputs = InputsOf(c, Bf16Values());
  Arrays<float> gpu_in = inputs, cpu_in = inputs;
  const Arrays<float> got = RunOpBf16(c, TestDevice(), gpu_in);
  Arrays<float> want = RunOp(c, Device::Cpu(), cpu_in);
  for (Arrays<float>* arrays : {&want, &cpu_in}) {
    for (std::vector<float>& a : *arrays) {
      for (float& x : a) x = BFloat16::FromFloat(x).ToFloat();
    }
  }
  const int ulps = CallsMathLibrary(c) ? 1 << 16 : 0;
  const std::string what =
      c.What() + " bfloat16 on " + TestDevice().ToString() + " vs the CPU's float32, rounded:";
  ExpectMatch(got, want, inputs, ulps, what + " output");
  ExpectMatch(gpu_in, cpu_in, inputs, ulps, what + " input after the call");
}

const int64_t kNumValues = static_cast<int64_t>(SpecialValues<float>().size());

// The registry's pointwise ops have calls here and functors this test knows, of every kind.
TEST(PointwiseSpecialValues, EveryPointwiseOpIsCovered) {
  std::set<PointwiseKind> kinds;
  for (const std::string& name : ListOps()) {
    const Op& op = GetOp(name);
    if (!op.pointwise || op.pointwise.functor_of) continue;  // Activation: AllCalls, per act_type
    const PointwiseKind kind = op.pointwise.kind;
    if (kind == PointwiseKind::kCast || kind == PointwiseKind::kReshape) continue;  // no arithmetic
    if (kind == PointwiseKind::kTernary) continue;  // where: ops_elementwise_test (NaN included)
    kinds.insert(kind);
    EXPECT_FALSE(CallsOf(op, kNumValues).empty()) << name;
    if (op.pointwise.kind == PointwiseKind::kAddN) continue;
    EXPECT_EQ(Functors().count(op.pointwise.functor), 1u)
        << name << " names the functor " << op.pointwise.functor
        << ", which this test does not know";
  }
  EXPECT_EQ(kinds.size(), 6u)
      << "every kind of pointwise op (unary, binary, their backward ops, add_n, updates)";
}

TEST(PointwiseSpecialValues, CpuComputesEqualTheirFunctorsBitForBit) {
  if (TestDevice().is_gpu())
    GTEST_SKIP() << "the CPU build of this file (ops_special_values_test) checks the CPU";
  for (const Call& c : AllCalls(kNumValues)) {
    ExpectCpuMatchesFunctor<float>(c);
    ExpectCpuMatchesFunctor<double>(c);
  }
}

TEST(PointwiseSpecialValues, GpuComputesEqualTheCpus) {
  if (!TestDevice().is_gpu())
    GTEST_SKIP() << "the GPU build of this file (gpu_ops_special_values_test) checks a GPU";
  for (const Call& c : AllCalls(kNumValues)) {
    if (c.sums_terms) continue;  // summation order differs (see the top of this file)
    ExpectGpuMatchesCpu<float>(c);
    ExpectGpuMatchesCpu<double>(c);
    ExpectGpuBf16MatchesCpu(c);
  }
}

// A functor's kGradReads decides what its backward op takes (ops/elementwise/unary.cc), so it must
// not lie: Grad gives the same bits with the value it does not read replaced by NaN, on every
// special value and scalar, and one that reads nothing gives them with both replaced.
template <typename F, typename T>
void ExpectGradReadsOnlyWhatItDeclares(const char* name) {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const bool reads_x = F::kGradReads == fn::GradReads::kInput,
             reads_y = F::kGradReads == fn::GradReads::kOutput;
  for (T s : SpecialValues<T>()) {
    for (T x : SpecialValues<T>()) {
      const T y = F::Fwd(x, s);
      EXPECT_TRUE(Matches(F::Grad(reads_x ? x : nan, reads_y ? y : nan, s), F::Grad(x, y, s), 0))
          << name << "'s Grad reads a value its kGradReads leaves out, at x = " << Show(x)
          << ", scalar " << Show(s);
    }
  }
}

TEST(PointwiseSpecialValues, EveryUnaryGradReadsOnlyWhatItDeclares) {
#define WEFT_GRAD_READS(functor)                                   \
  ExpectGradReadsOnlyWhatItDeclares<fn::functor, float>(#functor); \
  ExpectGradReadsOnlyWhatItDeclares<fn::functor, double>(#functor);
#define WEFT_OP_GRAD_READS(name, functor, description, has_scalar) WEFT_GRAD_READS(functor)
  WEFT_UNARY_OPS(WEFT_OP_GRAD_READS)
  WEFT_UNARY_EXTRA_FUNCTORS(WEFT_GRAD_READS)
#undef WEFT_OP_GRAD_READS
#undef WEFT_GRAD_READS
}

// ---- What the functors say, stated
// -----------------------------------------------------------------

// Output `output` of `op` on TestDevice() in float32, on inputs of one element (shapes: default
// (1,)).
float Apply(const std::string& op, const std::vector<float>& in, const AttrMap& attrs = {},
            std::vector<Shape> shapes = {}, int output = 0) {
  if (shapes.empty()) shapes.assign(in.size(), Shape{1});
  Call c{op, attrs, PointwiseKind::kNone, "", shapes, 1};
  Arrays<float> inputs;
  for (float x : in) inputs.push_back({x});
  return RunOp(c, TestDevice(), inputs)[output][0];
}

void ExpectBits(float got, float want, const std::string& what) {
  EXPECT_TRUE(Matches(got, want, 0))
      << what << ": got " << Show(got) << ", expected " << Show(want);
}

TEST(PointwiseSpecialValues, StatedSemantics) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  const float denormal = std::numeric_limits<float>::denorm_min();
  ExpectBits(Apply("relu", {nan}), nan, "relu(NaN) is NaN, not 0 (fmax's answer)");
  ExpectBits(Apply("relu", {-0.0f}), -0.0f, "relu(-0) is -0");
  ExpectBits(Apply("relu", {-inf}), 0.0f, "relu(-inf) is +0");
  ExpectBits(Apply("_backward_relu", {1, nan}), 0.0f, "relu's gradient at NaN is 0");
  ExpectBits(Apply("abs", {-0.0f}), 0.0f, "abs(-0) is +0");
  ExpectBits(Apply("sqrt", {-0.0f}), -0.0f, "sqrt(-0) is -0");
  ExpectBits(Apply("maximum_scalar", {nan}, {{"scalar", "1"}}), nan,
             "maximum_scalar(NaN, 1) is NaN");
  ExpectBits(Apply("maximum", {nan, 1}), 1.0f, "maximum(NaN, 1) is the rhs (ops/math/binary.h)");
  ExpectBits(Apply("maximum", {1, nan}), nan, "maximum(1, NaN) is the rhs");
  ExpectBits(Apply("maximum", {-0.0f, 0.0f}), -0.0f, "maximum(-0, +0) is the lhs on a tie");
  ExpectBits(Apply("minimum", {0.0f, -0.0f}), 0.0f, "minimum(+0, -0) is the lhs on a tie");
  ExpectBits(Apply("div", {1, -0.0f}), -inf, "1 / -0 is -inf");
  ExpectBits(Apply("add", {-0.0f, -0.0f}), -0.0f, "-0 + -0 is -0");
  ExpectBits(Apply("add_n", {-0.0f, -0.0f}, {{"num_args", "2"}}), -0.0f,
             "add_n of -0s is -0 (sums start at -0)");
  ExpectBits(Apply("_backward_add", {-0.0f, 1, 1}, {}, {Shape{1, 1}, Shape{1}, Shape{1, 1}}), -0.0f,
             "a broadcast gradient of one -0 term is -0");
  ExpectBits(Apply("neg", {denormal}), -denormal, "denormals are not flushed to zero");
  ExpectBits(Apply("mul", {denormal, 1}), denormal, "denormal * 1 is the denormal");
  ExpectBits(Apply("sgd_update", {1, nan}, {{"lr", "0.1"}, {"clip_gradient", "1"}}), nan,
             "clipping keeps a NaN gradient NaN");
  ExpectBits(Apply("sgd_mom_update", {1, 1, nan}, {{"lr", "0.1"}, {"momentum", "0.9"}}), nan,
             "a NaN momentum makes a NaN weight");
  // Cast is no pointwise op of the registry's (it changes dtype) but moves the same values.
  for (const char* dtype : {"float64", "bfloat16", "float32"}) {
    const NDArray x =
        NDArray::FromVector(std::vector<float>{-0.0f, nan, -inf}, Shape{3}).Copy(TestDevice());
    const NDArray back = CastTo(CastTo(x, dtype), "float32").Copy(Device::Cpu());
    const std::vector<float> v = back.ToVector<float>();
    ExpectBits(v[0], -0.0f, std::string("Cast to ") + dtype + " and back keeps -0");
    ExpectBits(v[1], nan, std::string("Cast to ") + dtype + " and back keeps NaN");
    ExpectBits(v[2], -inf, std::string("Cast to ") + dtype + " and back keeps -inf");
  }
}

}  // namespace
}  // namespace weft
