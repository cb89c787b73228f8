// Declarative operator tests: an op, its attributes and input shapes, and a plain reference
// implementation in double precision. The same test files build twice: against :op_test_util
// (TestDevice() is the CPU) and against :op_test_util_gpu (TestDevice() is gpu:0).
//
// On the CPU, RunOpCase checks:
//   1. forward in float32 against the reference (req kWrite), within `tolerance`;
//   2. forward with req kAddTo: the output is what was there plus the result;
//   3. (differentiable ops) the gradient of L = sum(w * out) for a fixed random w, computed by the
//      op's gradient rule in float64, against central finite differences in float64, with the
//      gradient requests kWrite and kAddTo.
//
// On a GPU it checks, in float32:
//   1. forward against the reference (within `tolerance`) and against the CPU's result (within
//      kGpuTolerance), with req kWrite and kAddTo;
//   2. (differentiable ops) the gradient rule's backward ops on the GPU against the same ops on
//      the CPU, with the gradient requests kWrite and kAddTo, within kGpuTolerance.
// Random ops draw the same numbers on both (the same seed before each). An op's hidden outputs
// (those after Op::visible_outputs: the RNN's reserve) are its own: the reference gives only the
// visible ones, the hidden ones are written with kWrite, never compared, and get zero gradients.
//
// Every op a case ran on TestDevice() is recorded (CoveredOps): tests/op_coverage_test.cc links
// every ops test file into one binary per device and checks, after all of them, that every op
// with a compute on that device was run by a case, forward or through a gradient rule.
//
//   OpCase c{"relu", {}, {Shape{3, 4}}, [](const Inputs& in) { ... return Outputs{...}; }};
//   c.init = AwayFromZero;     // keep inputs off relu's kink
//   RunOpCase(c);
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "ops/attrs.h"
#include "storage/ndarray.h"

namespace weft::testing {

using Values = std::vector<double>;
using Inputs = std::vector<Values>;
using Outputs = std::vector<Values>;

struct OpCase {
  std::string op;
  AttrMap attrs;
  std::vector<Shape> input_shapes;
  // Row-major inputs in, row-major outputs out; shapes as in input_shapes.
  std::function<Outputs(const Inputs&)> reference;
  // Fills input `i` (size already set); default: uniform in [-1, 1).
  std::function<void(int i, Values& values)> init;
  double tolerance = 1e-5;           // forward, float32: |got - want| <= tol * (1 + |want|)
  double gradient_tolerance = 1e-5;  // gradient, float64: same form
  bool check_gradient = true;
  std::vector<int> no_gradient_inputs;  // inputs without a gradient (indices, labels)
  // The mode of the forward call, and of its gradient (InvokeBackward's is_train).
  bool is_train = false;
  std::string name;  // what failures say; default: the op
};

void RunOpCase(const OpCase& c);

// The ops RunOpCase ran on TestDevice() in this process: each case's op once its forward checks
// ran, and the ops its gradient rule calls (its backward ops) once its gradient checks ran.
const std::set<std::string>& CoveredOps();
// For ops no case can call directly (the fused op, which only the fusion pass makes): records
// `op` as run on TestDevice() by a test that checked its results in another way.
void MarkCovered(const std::string& op);

// Where this build of the op tests runs its ops (op_test_device_{cpu,gpu}.cc).
Device TestDevice();
// GPU against CPU, both float32: |gpu - cpu| <= kGpuTolerance * (1 + |cpu|). Sums in another
// order (cuBLAS, cuDNN, tree reductions) differ from oneDNN's in the last bits of float32.
inline constexpr double kGpuTolerance = 2e-4;
// The floating-point types ops are tested in on TestDevice(): float32 and float64 on the CPU,
// float32 on a GPU (the GPU operators are float32 and bf16).
std::vector<DType> TestFloatTypes();

// ---- Arrays of any float dtype, for checks beyond the declarative cases ----

// `v` as an array of `dtype` on `device`: float32 and float64 as they are, bfloat16 (and other
// dtypes) cast from float32 on the CPU, float16 on `device` (a GPU: the CPU has none).
NDArray ArrayOf(const Values& v, const Shape& shape, DType dtype, Device device = TestDevice());
// Any float dtype's values, from any device (float16 cast to float32 on its own: a GPU).
Values ValuesOf(const NDArray& a);
// n values uniform in [low, high), exact in float32, the same for a seed.
Values Uniform(int64_t n, uint64_t seed, double low = -1, double high = 1);
// The nearest values bfloat16 holds.
Values Bf16Exact(const Values& v);
// |got - want| <= tol * (1 + |want|) elementwise; failures name `what` and the element.
void ExpectNear(const Values& got, const Values& want, double tol, const std::string& what);

// Calls the op on zero-filled float32 inputs of these shapes and expects a weft::Error whose
// message contains every one of `parts` (at call time or, for compute errors, at WaitToRead).
void ExpectOpError(const std::string& op, const AttrMap& attrs,
                   const std::vector<Shape>& input_shapes, const std::vector<std::string>& parts);

// Common input initializers.
void UniformAwayFromZero(int i, Values& v);  // |x| in [0.2, 1): off kinks at 0
void Positive(int i, Values& v);             // (0.2, 2): for log, sqrt, div
// Integer class indices in [0, classes) for input `which`; others uniform in [-1, 1).
std::function<void(int, Values&)> ClassIndices(int which, int classes);

// Helpers for references.
inline int64_t Size(const Shape& s) { return s.Size(); }

}  // namespace weft::testing
