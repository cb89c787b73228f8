// The RNN op (ops/nn/rnn_params.h) against its definition. The reference is built from weft's own
// verified ops: each mode unrolled as cells of FullyConnected and pointwise ops, one per step,
// layer and direction, with masks for the sequence lengths, as a Symbol bound with its gradients.
// Every mode runs with 1 and 2 layers, one and two directions, with and without lengths and initial
// states, forward and backward (data, parameters, initial states), in float32 (oneDNN's
// primitives, or the loops with lengths) and float64 (the loops), with requests write, add and
// null. Also: the declarative case with its float64 finite differences (op_test_util.h), dropout
// against the Dropout op's numbers, outputs from PyTorch (tests/data/rnn_torch.safetensors), the
// state_dict split and build, and every bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "executor/executor.h"
#include "graph/symbol.h"
#include "ops/nn/rnn_params.h"
#include "ops/op.h"
#include "passes/infer.h"
#include "storage/ndarray.h"
#include "storage/random.h"
#include "tests/op_test_util.h"
#include "tests/rnn_torch_cases.h"
#include "weft/imperative.h"
#include "weft/rnn_params.h"
#include "weft/serialization.h"

namespace weft::testing {
namespace {

// The ops a test pushed and did not wait for (an error case's) finish before the process exits:
// oneDNN's kernels are freed by static destructors, and a worker still in one crashed (seen once
// in 40 runs: a worker in dnnl_sgemm while exit freed its JIT code).
class WaitForTheEngineAtExit : public ::testing::Environment {
 public:
  void TearDown() override {
    try {
      engine::Engine::Get()->WaitForAll();
    } catch (const Error&) {  // an error case's error, already checked by its test
    }
  }
};
const auto* const wait_at_exit = ::testing::AddGlobalTestEnvironment(new WaitForTheEngineAtExit);

// ---- configurations ----

struct Config {
  RnnMode mode = RnnMode::kLstm;
  int layers = 1;
  bool bidirectional = false;
  int64_t t = 4, n = 3, i = 5, h = 4;
  bool lengths = false;        // sequence lengths T, 1, T-1, 2, ...
  bool random_states = false;  // random initial states, else zero
  bool state_outputs = false;
  double p = 0;  // dropout

  bool lstm() const { return mode == RnnMode::kLstm; }
  int dirs() const { return bidirectional ? 2 : 1; }
  std::string Name() const {
    return std::string(RnnModeName(mode)) + " L" + std::to_string(layers) +
           (bidirectional ? " bidirectional" : "") + (lengths ? " lengths" : "") +
           (random_states ? " states" : "") + (state_outputs ? " state_outputs" : "");
  }
};

AttrMap AttrsOf(const Config& c) {
  return {{"mode", RnnModeName(c.mode)},
          {"state_size", std::to_string(c.h)},
          {"num_layers", std::to_string(c.layers)},
          {"bidirectional", c.bidirectional ? "true" : "false"},
          {"p", std::to_string(c.p)},
          {"state_outputs", c.state_outputs ? "true" : "false"},
          {"use_sequence_length", c.lengths ? "true" : "false"}};
}

RnnParam ParamOf(const Config& c) { return ParseAttrs(GetOp("RNN"), AttrsOf(c)).Get<RnnParam>(); }
int64_t ParamSize(const Config& c) { return RnnParamLayout(ParamOf(c), c.i).size(); }
Shape StateShape(const Config& c) { return Shape{c.layers * c.dirs(), c.n, c.h}; }

std::vector<int64_t> Lengths(const Config& c) {
  std::vector<int64_t> l(c.n);
  for (int64_t k = 0; k < c.n; ++k)
    l[k] = k % 2 == 0 ? std::max<int64_t>(1, c.t - k / 2) : std::min(c.t, 1 + k / 2);
  return l;
}

// ---- the unrolled reference ----

Symbol Node(const std::string& op, const std::vector<Symbol>& in, const AttrMap& attrs = {}) {
  return Symbol::Op(op, in, attrs);
}
std::string Tuple(int64_t v) { return "(" + std::to_string(v) + ",)"; }
Symbol Slice(const Symbol& x, int64_t begin, int64_t end) {
  return Node("slice", {x}, {{"begin", Tuple(begin)}, {"end", Tuple(end)}});
}
Symbol Reshape(const Symbol& x, std::initializer_list<int64_t> shape) {
  std::string s = "(";
  for (int64_t d : shape) s += std::to_string(d) + ",";
  return Node("reshape", {x}, {{"shape", s + ")"}});
}
Symbol Concat(const std::vector<Symbol>& parts, int dim) {
  return Node("concat", parts,
              {{"num_args", std::to_string(parts.size())}, {"dim", std::to_string(dim)}});
}
Symbol OneMinus(const Symbol& x) { return Node("rsub_scalar", {x}, {{"scalar", "1"}}); }

// The cells of one call, as weft ops on (N, .) arrays per step.
class Unrolled {
 public:
  explicit Unrolled(const Config& c) : c_(c), layout_(ParamOf(c), c.i) {
    for (int64_t t = 0; t < c.t; ++t)
      masks_.push_back(Symbol::Variable("mask" + std::to_string(t)));
  }

  // out (T, N, D*H), then with state_outputs hy (and cy).
  Symbol Build() {
    Symbol input = data_;
    std::vector<Symbol> hy, cy;
    for (int l = 0; l < c_.layers; ++l) {
      if (l > 0 && c_.p > 0) input = Node("Dropout", {input}, {{"p", std::to_string(c_.p)}});
      std::vector<std::vector<Symbol>> y(c_.dirs());
      for (int d = 0; d < c_.dirs(); ++d) {
        auto [h, cell] = Direction(input, l, d, y[d]);
        hy.push_back(Reshape(h, {1, c_.n, c_.h}));
        if (c_.lstm()) cy.push_back(Reshape(cell, {1, c_.n, c_.h}));
      }
      std::vector<Symbol> steps;
      for (int64_t t = 0; t < c_.t; ++t) {
        std::vector<Symbol> both;
        for (int d = 0; d < c_.dirs(); ++d) both.push_back(y[d][t]);
        steps.push_back(Reshape(Concat(both, 1), {1, c_.n, c_.dirs() * c_.h}));
      }
      input = Concat(steps, 0);
    }
    std::vector<Symbol> outs = {input};
    if (c_.state_outputs) outs.push_back(Concat(hy, 0));
    if (c_.state_outputs && c_.lstm()) outs.push_back(Concat(cy, 0));
    return Symbol::Group(outs);
  }

 private:
  Symbol Weight(int64_t offset, int64_t rows, int64_t cols) {
    return Reshape(Slice(params_, offset, offset + rows * cols), {rows, cols});
  }
  // W_g x + b_g (from weight_ih, bias_ih) or U_g h + a_g (weight_hh, bias_hh) for gate g.
  Symbol Linear(const Symbol& x, int64_t weight, int64_t bias, int64_t cols, int g) {
    const int64_t h = c_.h;
    return Node("FullyConnected",
                {x, Weight(weight + g * h * cols, h, cols),
                 Slice(params_, bias + g * h, bias + (g + 1) * h)},
                {{"num_hidden", std::to_string(h)}});
  }
  Symbol Gate(const Symbol& x, const Symbol& h, const RnnBlock& b, int g) {
    return Node("add", {Linear(x, b.weight_ih, b.bias_ih, b.input, g),
                        Linear(h, b.weight_hh, b.bias_hh, c_.h, g)});
  }

  // One step of the cell: h' (and c').
  std::pair<Symbol, Symbol> Cell(const Symbol& x, const Symbol& h, const Symbol& cell,
                                 const RnnBlock& b) {
    switch (c_.mode) {
      case RnnMode::kLstm: {
        const Symbol i = Node("sigmoid", {Gate(x, h, b, 0)}),
                     f = Node("sigmoid", {Gate(x, h, b, 1)});
        const Symbol g = Node("tanh", {Gate(x, h, b, 2)}), o = Node("sigmoid", {Gate(x, h, b, 3)});
        const Symbol c2 = Node("add", {Node("mul", {f, cell}), Node("mul", {i, g})});
        return {Node("mul", {o, Node("tanh", {c2})}), c2};
      }
      case RnnMode::kGru: {
        const Symbol r = Node("sigmoid", {Gate(x, h, b, 0)}),
                     z = Node("sigmoid", {Gate(x, h, b, 1)});
        const Symbol n = Node(
            "tanh", {Node("add", {Linear(x, b.weight_ih, b.bias_ih, b.input, 2),
                                  Node("mul", {r, Linear(h, b.weight_hh, b.bias_hh, c_.h, 2)})})});
        return {Node("add", {Node("mul", {OneMinus(z), n}), Node("mul", {z, h})}), cell};
      }
      case RnnMode::kRnnTanh:
        return {Node("tanh", {Gate(x, h, b, 0)}), cell};
      case RnnMode::kRnnRelu:
        return {Node("relu", {Gate(x, h, b, 0)}), cell};
    }
    return {};
  }

  // Runs direction d of layer l over `input` (T, N, I_l); appends every step's output (N, H) to
  // y in step order; returns the final h and c. Masked steps keep the state and output zero.
  std::pair<Symbol, Symbol> Direction(const Symbol& input, int l, int d, std::vector<Symbol>& y) {
    const RnnBlock& b = layout_.Block(l, d);
    const int64_t row = l * c_.dirs() + d;
    Symbol h = Reshape(Slice(state_, row, row + 1), {c_.n, c_.h});
    Symbol cell = c_.lstm() ? Reshape(Slice(state_cell_, row, row + 1), {c_.n, c_.h}) : Symbol();
    y.assign(c_.t, Symbol());
    for (int64_t s = 0; s < c_.t; ++s) {
      const int64_t t = d == 0 ? s : c_.t - 1 - s;
      const Symbol x = Reshape(Slice(input, t, t + 1), {c_.n, b.input});
      auto [h2, c2] = Cell(x, h, cell, b);
      if (c_.lengths) {
        const Symbol m = masks_[t], keep = OneMinus(m);
        y[t] = Node("mul", {h2, m});
        h = Node("add", {y[t], Node("mul", {h, keep})});
        if (c_.lstm()) cell = Node("add", {Node("mul", {c2, m}), Node("mul", {cell, keep})});
      } else {
        y[t] = h = h2;
        cell = c2;
      }
    }
    return {h, cell};
  }

  const Config& c_;
  const RnnParamLayout layout_;
  const Symbol data_ = Symbol::Variable("data"), params_ = Symbol::Variable("parameters");
  const Symbol state_ = Symbol::Variable("state"), state_cell_ = Symbol::Variable("state_cell");
  std::vector<Symbol> masks_;  // (N, 1) per step: 1 where the step is within the sequence's length
};

// The op under test, as a graph with the same variables.
Symbol RnnSymbol(const Config& c) {
  std::vector<Symbol> in = {Symbol::Variable("data"), Symbol::Variable("parameters"),
                            Symbol::Variable("state")};
  if (c.lstm()) in.push_back(Symbol::Variable("state_cell"));
  if (c.lengths) in.push_back(Symbol::Variable("sequence_length"));
  return Symbol::Op("RNN", in, AttrsOf(c));
}

// ---- running both ----

// The values of one problem: inputs, and the gradients of the outputs.
struct Problem {
  std::map<std::string, std::vector<double>> args;  // data, parameters, state, state_cell
  std::vector<std::vector<double>> head_grads;      // per visible output
};

std::vector<double> Uniform(std::mt19937_64& rng, int64_t n, double scale) {
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<double> v(n);
  for (double& x : v) x = static_cast<float>(u(rng));  // exact in float32
  return v;
}

Problem MakeProblem(const Config& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Problem p;
  p.args["data"] = Uniform(rng, c.t * c.n * c.i, 1);
  p.args["parameters"] = Uniform(rng, ParamSize(c), 0.6);
  const int64_t state = StateShape(c).Size();
  p.args["state"] = c.random_states ? Uniform(rng, state, 1) : std::vector<double>(state, 0);
  if (c.lstm())
    p.args["state_cell"] = c.random_states ? Uniform(rng, state, 1) : std::vector<double>(state, 0);
  p.head_grads.push_back(Uniform(rng, c.t * c.n * c.dirs() * c.h, 1));
  if (c.state_outputs) p.head_grads.push_back(Uniform(rng, state, 1));
  if (c.state_outputs && c.lstm()) p.head_grads.push_back(Uniform(rng, state, 1));
  return p;
}

NDArray ArrayOf(const std::vector<double>& v, const Shape& s, DType dtype,
                Device device = TestDevice()) {
  if (dtype == DType::kFloat64) return NDArray::FromVector(v, s, device);
  return NDArray::FromVector(std::vector<float>(v.begin(), v.end()), s, device);
}

// The sequence_length input: a CPU array on every device (the op reads it on the host).
NDArray LengthsOf(const std::vector<double>& v, const Shape& s, DType dtype) {
  return ArrayOf(v, s, dtype, Device::Cpu());
}

std::vector<double> ValuesOf(const NDArray& a) {
  if (a.dtype() == DType::kFloat64) return a.ToVector<double>();
  const std::vector<float> v = a.ToVector<float>();
  return std::vector<double>(v.begin(), v.end());
}

Shape ArgShape(const Config& c, const std::string& name) {
  if (name == "data") return Shape{c.t, c.n, c.i};
  if (name == "parameters") return Shape{ParamSize(c)};
  if (name == "sequence_length") return Shape{c.n};
  if (name.rfind("mask", 0) == 0) return Shape{c.n, 1};
  return StateShape(c);
}

// What one bound run gives: the outputs, then the gradients by argument name.
struct BoundRun {
  std::vector<std::vector<double>> outputs;
  std::map<std::string, std::vector<double>> grads;
};

// Binds `net` (the op or the reference) with the problem's arguments and requests `reqs`
// (default write for data, parameters and the states); gradient arrays start at `start`.
BoundRun RunBound(const Config& c, const Symbol& net, const Problem& p, DType dtype,
                  std::map<std::string, GradReq> reqs = {}, double start = 0) {
  Executor::ArrayMap args, grads;
  const std::vector<int64_t> lengths = Lengths(c);
  for (const std::string& name : net.ListArguments()) {
    std::vector<double> v;
    if (p.args.count(name)) {
      v = p.args.at(name);
      if (!reqs.count(name)) reqs[name] = GradReq::kWrite;
      grads[name] = ArrayOf(std::vector<double>(v.size(), start), ArgShape(c, name), dtype);
    } else if (name == "sequence_length") {
      v.assign(lengths.begin(), lengths.end());
    } else {  // mask<t>
      const int64_t t = std::stoll(name.substr(4));
      for (int64_t n = 0; n < c.n; ++n) v.push_back(t < lengths[n] ? 1 : 0);
    }
    args[name] = name == "sequence_length" ? LengthsOf(v, ArgShape(c, name), dtype)
                                           : ArrayOf(v, ArgShape(c, name), dtype);
  }
  auto exec = Executor::Bind(net, TestDevice(), args, grads, reqs);
  exec->Forward(/*is_train=*/true);
  std::vector<NDArray> heads;
  for (size_t o = 0; o < exec->outputs().size(); ++o)
    heads.push_back(ArrayOf(p.head_grads[o], exec->outputs()[o].shape(), dtype));
  exec->Backward(heads);
  BoundRun r;
  for (const NDArray& o : exec->outputs()) r.outputs.push_back(ValuesOf(o));
  for (const auto& [name, g] : grads) r.grads[name] = ValuesOf(g);
  return r;
}

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, double tol,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_NEAR(got[k], want[k], tol * (1 + std::abs(want[k]))) << what << ", element " << k;
  }
}

// float32 on a GPU: cuDNN's summation order (op_test_util.h's GPU tolerance).
double ToleranceOf(DType dtype) {
  if (dtype == DType::kFloat64) return 1e-10;
  return TestDevice().is_gpu() ? kGpuTolerance : 2e-5;
}

// The op and the reference on one problem, forward and backward, in `dtype`.
void ExpectMatchesReference(const Config& c, DType dtype, uint64_t seed = 1) {
  SCOPED_TRACE(c.Name() + " " + std::string(DTypeName(dtype)));
  const Problem p = MakeProblem(c, seed);
  const BoundRun want = RunBound(c, Unrolled(c).Build(), p, dtype);
  const BoundRun got = RunBound(c, RnnSymbol(c), p, dtype);
  ASSERT_EQ(got.outputs.size(), want.outputs.size());
  const double tol = ToleranceOf(dtype);
  for (size_t o = 0; o < want.outputs.size(); ++o)
    ExpectNear(got.outputs[o], want.outputs[o], tol, "output " + std::to_string(o));
  for (const auto& [name, g] : want.grads)
    ExpectNear(got.grads.at(name), g, tol * 5, "gradient of " + name);
}

// ---- the tests ----

class RnnTest : public ::testing::Test {};
using Rnn = RnnTest;
using RnnDefinition = RnnTest;
using RnnParameters = RnnTest;

// Every configuration of one mode: 1 and 2 layers, one and two directions, with and without
// lengths and initial states (state outputs on in half of them).
std::vector<Config> Grid(RnnMode mode) {
  std::vector<Config> grid;
  for (int layers : {1, 2})
    for (bool bidirectional : {false, true})
      for (bool lengths : {false, true})
        for (bool states : {false, true}) {
          Config c;
          c.mode = mode, c.layers = layers, c.bidirectional = bidirectional, c.lengths = lengths;
          c.random_states = states, c.state_outputs = states != lengths;
          grid.push_back(c);
        }
  return grid;
}

void ExpectGridMatchesReference(RnnMode mode) {
  for (const Config& c : Grid(mode)) {
    for (DType dtype : TestFloatTypes()) {
      ExpectMatchesReference(c, dtype);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST_F(Rnn, LstmMatchesUnrolledCellsForwardAndBackward) {
  ExpectGridMatchesReference(RnnMode::kLstm);
}
TEST_F(Rnn, GruMatchesUnrolledCellsForwardAndBackward) {
  ExpectGridMatchesReference(RnnMode::kGru);
}
TEST_F(Rnn, RnnTanhMatchesUnrolledCellsForwardAndBackward) {
  ExpectGridMatchesReference(RnnMode::kRnnTanh);
}
TEST_F(Rnn, RnnReluMatchesUnrolledCellsForwardAndBackward) {
  ExpectGridMatchesReference(RnnMode::kRnnRelu);
}

TEST_F(Rnn, LongerSequencesAndWiderLayersMatchTheReference) {
  Config c;
  c.layers = 2, c.bidirectional = true, c.t = 9, c.n = 5, c.i = 7, c.h = 6, c.random_states = true;
  for (RnnMode mode : {RnnMode::kLstm, RnnMode::kGru}) {
    c.mode = mode;
    ExpectMatchesReference(c, DType::kFloat32, 3);
  }
}

// ---- requests ----

// Every argument's gradient with each request, for the oneDNN path (no lengths), the loops with
// lengths, and float64: write is the reference, add adds it to what was there (0.5), null leaves
// the array alone (and, for the parameters, skips their gradient).
TEST_F(Rnn, GradientRequestsWriteAddAndNullForEachInput) {
  const std::vector<std::map<std::string, GradReq>> cases = {
      {{"data", GradReq::kAdd},
       {"parameters", GradReq::kAdd},
       {"state", GradReq::kAdd},
       {"state_cell", GradReq::kAdd}},
      {{"data", GradReq::kAdd}, {"parameters", GradReq::kNull}},  // the seed's case
      {{"data", GradReq::kNull}, {"state", GradReq::kAdd}},
      {{"parameters", GradReq::kAdd}, {"state", GradReq::kNull}, {"state_cell", GradReq::kNull}},
      {{"data", GradReq::kNull}, {"parameters", GradReq::kNull}, {"state", GradReq::kNull}},
  };
  Config c;
  c.layers = 2, c.bidirectional = true, c.random_states = true, c.state_outputs = true;
  for (bool lengths : {false, true}) {
    c.lengths = lengths;
    for (DType dtype : TestFloatTypes()) {
      const Problem p = MakeProblem(c, 7);
      const BoundRun want = RunBound(c, Unrolled(c).Build(), p, dtype);
      for (const auto& reqs : cases) {
        const BoundRun got = RunBound(c, RnnSymbol(c), p, dtype, reqs, 0.5);
        for (const auto& [name, g] : want.grads) {
          SCOPED_TRACE(c.Name() + " " + std::string(DTypeName(dtype)) + " gradient of " + name);
          const GradReq req = reqs.count(name) ? reqs.at(name) : GradReq::kWrite;
          std::vector<double> expected = g;
          for (double& x : expected)
            x = req == GradReq::kNull ? 0.5 : req == GradReq::kAdd ? x + 0.5 : x;
          ExpectNear(got.grads.at(name), expected, ToleranceOf(dtype) * 5, "");
        }
      }
    }
  }
}

// ---- imperative calls ----

// The op's inputs for a problem, as arrays (lengths from Lengths(c)).
std::vector<NDArray> InputsOf(const Config& c, const Problem& p, DType dtype) {
  std::vector<NDArray> in;
  for (const char* name : {"data", "parameters", "state", "state_cell"}) {
    if (p.args.count(name)) in.push_back(ArrayOf(p.args.at(name), ArgShape(c, name), dtype));
  }
  if (c.lengths) {
    const std::vector<int64_t> l = Lengths(c);
    in.push_back(LengthsOf(std::vector<double>(l.begin(), l.end()), Shape{c.n}, dtype));
  }
  return in;
}

// The gradients of every input but the lengths, through InvokeBackward after a training forward.
std::vector<std::vector<double>> ImperativeGradients(const Config& c, const Problem& p, DType dtype,
                                                     const std::vector<NDArray>& in,
                                                     const std::vector<NDArray>& out) {
  const Op& op = GetOp("RNN");
  const Attrs attrs = ParseAttrs(op, AttrsOf(c));
  std::vector<NDArray> heads, grads;
  for (size_t o = 0; o < out.size(); ++o) {
    heads.push_back(o < p.head_grads.size() ? ArrayOf(p.head_grads[o], out[o].shape(), dtype)
                                            : out[o]);
  }
  std::vector<OpReq> reqs;
  for (size_t i = 0; i < in.size(); ++i) {
    grads.emplace_back(in[i].shape(), TestDevice(), dtype);
    reqs.push_back(c.lengths && i + 1 == in.size() ? OpReq::kNull : OpReq::kWrite);
  }
  InvokeBackward(op, attrs, in, out, heads, grads, reqs);
  std::vector<std::vector<double>> values;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (reqs[i] != OpReq::kNull) values.push_back(ValuesOf(grads[i]));
  }
  return values;
}

TEST_F(Rnn, ImperativeCallsGiveTheBoundGraphsResults) {
  for (bool lengths : {false, true}) {
    Config c;
    c.mode = RnnMode::kGru, c.layers = 2, c.bidirectional = true, c.lengths = lengths,
    c.random_states = true;
    c.state_outputs = true;
    const Problem p = MakeProblem(c, 11);
    const BoundRun want = RunBound(c, Unrolled(c).Build(), p, DType::kFloat32);
    const std::vector<NDArray> in = InputsOf(c, p, DType::kFloat32);
    const std::vector<NDArray> out = Invoke("RNN", in, AttrsOf(c), {.is_train = true});
    ASSERT_EQ(out.size(), 3u);  // out, state_output, then the reserve
    EXPECT_EQ(out[2].dtype(), DType::kUInt8);
    for (size_t o = 0; o < 2; ++o)
      ExpectNear(ValuesOf(out[o]), want.outputs[o], 2e-5, "output " + std::to_string(o));
    const auto grads = ImperativeGradients(c, p, DType::kFloat32, in, out);
    const char* names[] = {"data", "parameters", "state"};
    for (int i = 0; i < 3; ++i)
      ExpectNear(grads[i], want.grads.at(names[i]), 1e-4, std::string("gradient of ") + names[i]);
  }
}

// A training forward's reserve serves its backward; on the CPU it is left as it was, so a second
// backward after the same forward gives the same gradients.
TEST_F(Rnn, ASecondBackwardAfterOneForwardGivesTheSameGradients) {
  if (TestDevice().is_gpu())
    GTEST_SKIP() << "a GPU's backward may change the reserve (rnn_params.h)";
  Config c;
  c.layers = 2, c.bidirectional = true, c.random_states = true, c.state_outputs = true;
  for (RnnMode mode : {RnnMode::kLstm, RnnMode::kGru, RnnMode::kRnnTanh, RnnMode::kRnnRelu}) {
    c.mode = mode;
    const Problem p = MakeProblem(c, 13);
    const std::vector<NDArray> in = InputsOf(c, p, DType::kFloat32);
    const std::vector<NDArray> out = Invoke("RNN", in, AttrsOf(c), {.is_train = true});
    const auto first = ImperativeGradients(c, p, DType::kFloat32, in, out);
    const auto second = ImperativeGradients(c, p, DType::kFloat32, in, out);
    for (size_t i = 0; i < first.size(); ++i) {
      ExpectNear(second[i], first[i], 0,
                 std::string(RnnModeName(mode)) + " input " + std::to_string(i));
    }
  }
}

// ---- PyTorch's numbers ----

// A case's named tensors as float32 (or float64) arrays.
std::map<std::string, NDArray> TorchTensors(const torch_cases::Case& tc, DType dtype) {
  std::map<std::string, NDArray> out;
  for (const torch_cases::Tensor& t : tc.tensors)
    out[t.name] = ArrayOf(t.values, Shape(std::span(t.shape)), dtype);
  return out;
}

const std::vector<double>& TorchValues(const torch_cases::Case& tc, const std::string& name) {
  for (const torch_cases::Tensor& t : tc.tensors) {
    if (name == t.name) return t.values;
  }
  throw Error("no tensor " + name + " in PyTorch case " + tc.name);
}

// Weights saved from nn.LSTM, nn.GRU and nn.RNN (as a state_dict) give PyTorch's outputs and
// gradients, packed sequences included.
TEST_F(Rnn, GivesPyTorchsOutputsAndGradientsWithItsStateDict) {
  for (const torch_cases::Case& tc : torch_cases::Cases()) {
    for (DType dtype : TestFloatTypes()) {
      SCOPED_TRACE(std::string(tc.name) + " " + std::string(DTypeName(dtype)));
      const bool lstm = std::string(tc.mode) == "lstm", lengths = !tc.lengths.empty();
      const AttrMap attrs = {{"mode", tc.mode},
                             {"state_size", std::to_string(torch_cases::kH)},
                             {"num_layers", std::to_string(tc.layers)},
                             {"bidirectional", tc.bidirectional ? "1" : "0"},
                             {"state_outputs", "true"},
                             {"use_sequence_length", lengths ? "true" : "false"}};
      const std::map<std::string, NDArray> named = TorchTensors(tc, dtype);
      std::vector<NDArray> in = {
          named.at("x"), BuildRnnParameters(attrs, torch_cases::kI, named, "rnn."), named.at("h0")};
      if (lstm) in.push_back(named.at("c0"));
      if (lengths)
        in.push_back(LengthsOf(std::vector<double>(tc.lengths.begin(), tc.lengths.end()),
                               Shape{torch_cases::kN}, dtype));
      const std::vector<NDArray> out = Invoke("RNN", in, attrs, {.is_train = true});
      const double tol = dtype == DType::kFloat64 ? 1e-12 : 2e-6;
      ExpectNear(ValuesOf(out[0]), TorchValues(tc, "y"), tol, "y");
      ExpectNear(ValuesOf(out[1]), TorchValues(tc, "hy"), tol, "hy");
      if (lstm) ExpectNear(ValuesOf(out[2]), TorchValues(tc, "cy"), tol, "cy");
      std::vector<NDArray> heads = {named.at("gy"), named.at("ghy")};
      if (lstm) heads.push_back(named.at("gcy"));
      heads.push_back(out.back());  // the reserve gets none
      std::vector<NDArray> grads;
      std::vector<OpReq> reqs;
      for (const NDArray& a : in)
        grads.emplace_back(a.shape(), TestDevice(), dtype), reqs.push_back(OpReq::kWrite);
      if (lengths) reqs.back() = OpReq::kNull;
      const Op& op = GetOp("RNN");
      InvokeBackward(op, ParseAttrs(op, attrs), in, out, heads, grads, reqs);
      ExpectNear(ValuesOf(grads[0]), TorchValues(tc, "dx"), tol * 5, "dx");
      ExpectNear(ValuesOf(grads[2]), TorchValues(tc, "dh0"), tol * 5, "dh0");
      if (lstm) ExpectNear(ValuesOf(grads[3]), TorchValues(tc, "dc0"), tol * 5, "dc0");
      for (const auto& [name, g] : SplitRnnParameters(attrs, torch_cases::kI, grads[1], "rnn.")) {
        ExpectNear(ValuesOf(g), TorchValues(tc, "grad." + name), tol * 5, "gradient of " + name);
      }
    }
  }
}

// ---- sequence lengths ----

// Each sequence of a batch with lengths gives what it gives alone, run for its own length: out
// is zero past it (with no gradient), the final states are those of its last step.
TEST_F(Rnn, EachSequenceOfABatchGivesWhatItGivesAlone) {
  for (RnnMode mode : {RnnMode::kLstm, RnnMode::kGru, RnnMode::kRnnTanh}) {
    Config c;
    c.mode = mode, c.layers = 2, c.bidirectional = true, c.lengths = true, c.random_states = true;
    c.state_outputs = true, c.n = 4;
    const Problem p = MakeProblem(c, 17);
    const std::vector<NDArray> in = InputsOf(c, p, DType::kFloat32);
    const std::vector<NDArray> out = Invoke("RNN", in, AttrsOf(c), {.is_train = true});
    const std::vector<double> y = ValuesOf(out[0]), hy = ValuesOf(out[1]);
    const std::vector<double> dx = ImperativeGradients(c, p, DType::kFloat32, in, out)[0];
    const std::vector<int64_t> lengths = Lengths(c);
    const int64_t width = c.dirs() * c.h;
    for (int64_t n = 0; n < c.n; ++n) {
      SCOPED_TRACE(std::string(RnnModeName(mode)) + " sequence " + std::to_string(n));
      Config alone = c;
      alone.lengths = false, alone.n = 1, alone.t = lengths[n];
      // (rows, N, cols) -> (rows, 1, cols): sequence n's column of the data or of a state.
      auto column = [&](const NDArray& a, int64_t rows, int64_t cols) {
        const std::vector<double> v = ValuesOf(a);
        std::vector<double> picked;
        for (int64_t r = 0; r < rows; ++r) {
          picked.insert(picked.end(), v.begin() + (r * c.n + n) * cols,
                        v.begin() + (r * c.n + n + 1) * cols);
        }
        return picked;
      };
      std::vector<NDArray> one = {
          ArrayOf(column(in[0], alone.t, c.i), Shape{alone.t, 1, c.i}, DType::kFloat32), in[1],
          ArrayOf(column(in[2], 4, c.h), StateShape(alone), DType::kFloat32)};
      if (c.lstm())
        one.push_back(ArrayOf(column(in[3], 4, c.h), StateShape(alone), DType::kFloat32));
      const std::vector<NDArray> solo = Invoke("RNN", one, AttrsOf(alone));
      const std::vector<double> want_y = ValuesOf(solo[0]), want_hy = ValuesOf(solo[1]);
      for (int64_t t = 0; t < c.t; ++t) {
        for (int64_t k = 0; k < width; ++k) {
          const double got = y[(t * c.n + n) * width + k];
          if (t < alone.t) {
            ASSERT_NEAR(got, want_y[t * width + k], 1e-5) << "out at step " << t;
          } else {
            ASSERT_EQ(got, 0.0) << "out at step " << t << ", past the length";
          }
        }
        for (int64_t k = 0; k < c.i && t >= alone.t; ++k)
          ASSERT_EQ(dx[(t * c.n + n) * c.i + k], 0.0) << "d data past the length";
      }
      const std::vector<double> got_hy = column(out[1], 4, c.h);
      ExpectNear(got_hy, want_hy, 1e-5, "final state");
    }
  }
}

// ---- dropout ----

// Dropout between layers, in training, keeps element k of layer l's input when the Dropout op
// would: the RNN's draws are the numbers two Dropout ops after one another draw (the inputs hold
// a multiple of four elements, so their ranges meet).
TEST_F(Rnn, DropoutBetweenLayersDrawsWhatTheDropoutOpDraws) {
  if (TestDevice().is_gpu())
    GTEST_SKIP() << "a GPU's RNN dropout is cuDNN's, whose draws are not the Dropout op's";
  Config c;
  c.layers = 3, c.bidirectional = true, c.p = 0.4, c.t = 4, c.n = 2, c.h = 4,
  c.random_states = true;
  for (RnnMode mode : {RnnMode::kLstm, RnnMode::kGru}) {
    c.mode = mode;
    for (DType dtype : TestFloatTypes()) {
      SCOPED_TRACE(c.Name() + " " + std::string(DTypeName(dtype)));
      const Problem p = MakeProblem(c, 19);
      SeedRandom(5);
      const BoundRun want = RunBound(c, Unrolled(c).Build(), p, dtype);
      SeedRandom(5);
      const BoundRun got = RunBound(c, RnnSymbol(c), p, dtype);
      ExpectNear(got.outputs[0], want.outputs[0], ToleranceOf(dtype), "out");
      for (const auto& [name, g] : want.grads)
        ExpectNear(got.grads.at(name), g, ToleranceOf(dtype) * 5, "gradient of " + name);
      Config none = c;
      none.p = 0;
      const std::vector<NDArray> in = InputsOf(c, p, dtype);
      const NDArray kept = Invoke("RNN", in, AttrsOf(none))[0];
      ExpectNear(ValuesOf(Invoke("RNN", in, AttrsOf(c))[0]), ValuesOf(kept), 0,
                 "outside training: no dropout");
      EXPECT_NE(got.outputs[0], ValuesOf(kept)) << "in training, dropout changes the output";
    }
  }
}

// Dropout between layers, on either device (on a GPU cuDNN's, from one random state per stream,
// ops/gpu/rnn.cc, which no other test reaches; on the CPU the Dropout op's draws). Two relu RNNs of
// 2 layers whose layers pass their input through (weight_ih the identity, weight_hh and the biases
// 0), on inputs of ones, in one graph (the engine may run them on two streams at once): each
// outputs 1 / (1 - p) where cuDNN kept layer 1's value and 0 where it dropped it. Each keeps 1 - p
// of them within 5 sigma; each one's backward of ones gives d_data in the same pattern (the
// backward reads its forward's mask from the reserve, not a new draw); and the two masks differ
// (their states are not one state read twice).
TEST_F(Rnn, DropoutKeepsOneMinusPAndEachBackwardUsesItsForwardsMask) {
  Config c;
  c.mode = RnnMode::kRnnRelu;
  c.layers = 2, c.t = 8, c.n = 16, c.i = 64, c.h = 64, c.p = 0.3;
  const RnnParamLayout layout(ParamOf(c), c.i);
  Values params(layout.size(), 0.0);
  for (int l = 0; l < c.layers; ++l) {
    const RnnBlock b = layout.Block(l, 0);
    for (int64_t k = 0; k < c.h; ++k) params[b.weight_ih + k * b.input + k] = 1;
  }
  Executor::ArrayMap args, grads;
  std::map<std::string, GradReq> reqs;
  std::vector<Symbol> rnns;
  for (const std::string k : {"a", "b"}) {
    rnns.push_back(Symbol::Op("RNN",
                              {Symbol::Variable("data_" + k), Symbol::Variable("params_" + k),
                               Symbol::Variable("state_" + k)},
                              AttrsOf(c), "rnn_" + k));
    args["data_" + k] =
        ArrayOf(Values(c.t * c.n * c.i, 1.0), Shape{c.t, c.n, c.i}, DType::kFloat32);
    args["params_" + k] = ArrayOf(params, Shape{layout.size()}, DType::kFloat32);
    args["state_" + k] = ArrayOf(Values(StateShape(c).Size(), 0.0), StateShape(c), DType::kFloat32);
    grads["data_" + k] = NDArray(Shape{c.t, c.n, c.i}, TestDevice());
    reqs["data_" + k] = GradReq::kWrite;
  }
  auto exec = Executor::Bind(Symbol::Group(rnns), TestDevice(), args, grads, reqs);
  exec->Forward(/*is_train=*/true);
  exec->Backward();  // of the sum of both outputs
  const double scale = 1 / (1 - c.p), n = static_cast<double>(c.t * c.n * c.h);
  std::vector<Values> outs;
  for (int r = 0; r < 2; ++r) {
    const std::string k = r == 0 ? "a" : "b";
    const Values y = ValuesOf(exec->outputs()[r]), dx = ValuesOf(grads.at("data_" + k));
    int64_t kept = 0, off = 0;
    for (size_t e = 0; e < y.size(); ++e) {
      kept += y[e] != 0;
      off += !(y[e] == 0 || std::abs(y[e] - scale) < 1e-5);
      off += std::abs(dx[e] - y[e]) > 1e-5;  // the backward's mask is the forward's
    }
    EXPECT_EQ(off, 0) << "rnn " << k << ": values other than 0 and 1 / (1 - p), or a gradient "
                      << "that does not follow the output's mask";
    EXPECT_LE(std::abs(kept - n * (1 - c.p)), 5 * std::sqrt(n * c.p * (1 - c.p)))
        << "rnn " << k << ": kept " << kept << " of " << n;
    outs.push_back(y);
  }
  EXPECT_NE(outs[0], outs[1]) << "the two RNNs drew the same mask";
}

// ---- the declarative case (op_test_util.h): float32 forward, req add, float64 finite differences
// ----

// The reference's outputs for the harness's inputs (data, parameters, state[, state_cell][,
// lengths]).
Outputs ReferenceOutputs(const Config& c, const Inputs& in) {
  Problem p;
  const char* names[] = {"data", "parameters", "state", "state_cell"};
  for (int k = 0; k < (c.lstm() ? 4 : 3); ++k) p.args[names[k]] = in[k];
  const Symbol net = Unrolled(c).Build();
  Executor::ArrayMap args;
  for (const std::string& name : net.ListArguments()) {
    std::vector<double> v;
    if (p.args.count(name)) {
      v = p.args.at(name);
    } else {
      const int64_t t = std::stoll(name.substr(4));
      for (int64_t n = 0; n < c.n; ++n) v.push_back(t < static_cast<int64_t>(in.back()[n]) ? 1 : 0);
    }
    args[name] = NDArray::FromVector(v, ArgShape(c, name), Device::Cpu());
  }
  auto exec = Executor::Bind(net, Device::Cpu(), args);
  exec->Forward(/*is_train=*/false);
  Outputs out;
  for (const NDArray& o : exec->outputs()) out.push_back(o.ToVector<double>());
  return out;
}

OpCase RnnCase(const Config& c) {
  std::vector<Shape> shapes = {Shape{c.t, c.n, c.i}, Shape{ParamSize(c)}, StateShape(c)};
  if (c.lstm()) shapes.push_back(StateShape(c));
  if (c.lengths) shapes.push_back(Shape{c.n});
  OpCase k{"RNN", AttrsOf(c), shapes, [c](const Inputs& in) { return ReferenceOutputs(c, in); }};
  const int lengths = c.lengths ? static_cast<int>(shapes.size()) - 1 : -1;
  k.init = [c, lengths](int i, Values& v) {
    if (i != lengths) return;
    const std::vector<int64_t> l = Lengths(c);
    v.assign(l.begin(), l.end());
  };
  if (c.lengths) k.no_gradient_inputs = {lengths};
  k.is_train = true;  // the backward needs a training forward's reserve
  k.tolerance = 2e-5;
  k.gradient_tolerance = 1e-6;
  k.name = "RNN " + c.Name();
  return k;
}

TEST_F(Rnn, DeclarativeCasesWithFiniteDifferenceGradients) {
  Config c;
  c.t = 3, c.n = 2, c.i = 3, c.h = 2, c.random_states = true;
  for (RnnMode mode : {RnnMode::kLstm, RnnMode::kGru, RnnMode::kRnnTanh, RnnMode::kRnnRelu}) {
    c.mode = mode;
    c.layers = 2, c.bidirectional = true, c.lengths = false, c.state_outputs = true;
    RunOpCase(RnnCase(c));
    c.layers = 1, c.bidirectional = mode != RnnMode::kRnnRelu, c.lengths = true,
    c.state_outputs = mode == RnnMode::kLstm;
    RunOpCase(RnnCase(c));
  }
}

// ---- definition ----

TEST_F(RnnDefinition, ASymbolShowsTheVisibleOutputsAndNamesTheInputsTheAttributesChoose) {
  const Symbol x = Symbol::Variable("x");
  const AttrMap lstm = {
      {"mode", "lstm"}, {"state_size", "128"}, {"num_layers", "2"}, {"bidirectional", "true"}};
  const Symbol enc = Symbol::Op("RNN", {x}, lstm, "enc");
  EXPECT_EQ(enc.num_outputs(), 1u);  // the reserve is hidden
  EXPECT_EQ(enc.ListArguments(),
            (std::vector<std::string>{"x", "enc_parameters", "enc_state", "enc_state_cell"}));
  const Symbol gru = Symbol::Op("RNN", {x},
                                {{"mode", "gru"},
                                 {"state_size", "8"},
                                 {"state_outputs", "true"},
                                 {"use_sequence_length", "1"}},
                                "g");
  EXPECT_EQ(gru.num_outputs(), 2u);
  EXPECT_EQ(gru.ListArguments(),
            (std::vector<std::string>{"x", "g_parameters", "g_state", "g_sequence_length"}));
  // PyTorch's nn.LSTM(64, 128, num_layers=2, bidirectional=True) has 593,920 parameters.
  const auto shapes = InferArgumentShapes(enc.ToGraph(), {{"x", Shape{32, 16, 64}}});
  EXPECT_EQ(shapes.at("enc_parameters"), Shape{593920});
  EXPECT_EQ(shapes.at("enc_state"), (Shape{4, 16, 128}));
  EXPECT_EQ(Symbol::FromJson(enc.ToJson()).num_outputs(), 1u);
  // The reserve: a uint8 output sized for the device; (0,) without one.
  const Op& op = GetOp("RNN");
  const std::vector<Shape> in = {Shape{32, 16, 64}, Shape{593920}, Shape{4, 16, 128},
                                 Shape{4, 16, 128}};
  EXPECT_EQ(InferShapes(op, ParseAttrs(op, lstm), in).back(), Shape{0});
  EXPECT_GT(InferShapes(op, ParseAttrs(op, lstm), in, TestDevice().type).back()[0], 0);
  EXPECT_EQ(InferTypes(op, ParseAttrs(op, lstm), std::vector<DType>(4, DType::kFloat32)).back(),
            DType::kUInt8);
}

TEST_F(RnnDefinition, BadInputsSayWhatWasExpected) {
  const AttrMap lstm = {
      {"mode", "lstm"}, {"state_size", "4"}, {"num_layers", "2"}, {"bidirectional", "true"}};
  const Shape data{5, 3, 6}, params{Shape{2 * 16 * (6 + 4 + 2) + 2 * 16 * (8 + 4 + 2)}},
      state{4, 3, 4};
  ExpectOpError(
      "RNN", lstm, {data, Shape{100}, state, state},
      {"parameters must be (832,), found (100,)", "4 block(s) (2 layer(s) x 2 direction(s))",
       "weight_ih (16, I_l) + weight_hh (16, 4) + bias_ih (16) + bias_hh (16)", "I_0 = 6",
       "I_l = 8 after", "2 x 192 + 2 x 224", "PyTorch's nn.LSTM layout"});
  ExpectOpError(
      "RNN", lstm, {data, params, Shape{2, 3, 4}, state},
      {"state must be (4, 3, 4) (num_layers * directions, batch, state_size)", "found (2, 3, 4)"});
  ExpectOpError("RNN", lstm, {data, params, state, Shape{4, 2, 4}},
                {"state_cell must be (4, 3, 4)", "found (4, 2, 4)"});
  ExpectOpError("RNN", lstm, {Shape{5, 18}, params, state, state},
                {"data must be (T, N, I)", "found (5, 18)"});
  ExpectOpError("RNN", lstm, {data, params, state}, {"expected 4 input(s), found 3"});
  AttrMap lengths = lstm;
  lengths["use_sequence_length"] = "true";
  ExpectOpError("RNN", lengths, {data, params, state, state, Shape{4}},
                {"sequence_length must be (3,)", "found (4,)"});
  ExpectOpError("RNN", lengths, {data, params, state, state, Shape{3}},  // zero-filled lengths
                {"sequence_length[0] is 0, expected a length in [1, 5]"});
  ExpectOpError("RNN", {{"mode", "lstmm"}, {"state_size", "4"}}, {data, params, state, state},
                {"attribute 'mode'", "one of 'lstm' 'gru' 'rnn_tanh' 'rnn_relu'", "found 'lstmm'"});
  ExpectOpError("RNN", {{"state_size", "4"}}, {data, params, state, state},
                {"attribute 'mode' is required"});
  ExpectOpError("RNN", {{"mode", "gru"}, {"state_size", "0"}}, {data, params, state},
                {"attribute 'state_size'", "found '0'"});
  ExpectOpError("RNN", {{"mode", "gru"}, {"state_size", "4"}, {"p", "1"}}, {data, params, state},
                {"attribute 'p'", "[0, 1)"});
  ExpectOpError("RNN", {{"mode", "gru"}, {"state_size", "4"}, {"num_layers", "0"}},
                {data, params, state}, {"attribute 'num_layers'", "found '0'"});
  // A billion layers are checked in closed form (the fuzzer's finding: a loop over them timed
  // out), and a vector past int64 is an error, not an overflow.
  AttrMap deep = lstm;
  deep["num_layers"] = "1000010000";
  ExpectOpError("RNN", deep, {data, Shape{832}, state, state},
                {"parameters must be (448004479936,), found (832,)", "1000010000 layer(s)",
                 "2 x 192 + 1000009999 x (2 x 224)"});
  deep["state_size"] = "1073741824";  // the largest: blocks of 2^32 rows
  ExpectOpError(
      "RNN", deep, {data, Shape{832}, state, state},
      {"more than 2^63 elements", "1000009999 x (2 x 4294967296 x (2147483648 + 1073741824 + 2))"});
}

// sequence_length is read on the host on every device (cuDNN's descriptors take the lengths
// there): a CPU array, an argument a graph binds on the CPU, and a call that a CUDA graph never
// records (a replay would keep the lengths it was recorded with).
TEST_F(RnnDefinition, SequenceLengthIsAHostInputThatKeepsTheCallOutOfCudaGraphs) {
  const Op& rnn = GetOp("RNN");
  const Op& backward = GetOp("_backward_RNN");
  const AttrMap lstm = {{"mode", "lstm"}, {"state_size", "4"}, {"use_sequence_length", "true"}};
  const AttrMap gru = {{"mode", "gru"}, {"state_size", "4"}, {"use_sequence_length", "true"}};
  const AttrMap plain = {{"mode", "gru"}, {"state_size", "4"}};
  EXPECT_EQ(rnn.HostInputsOf(ParseAttrs(rnn, lstm)),
            std::vector<int>{4});  // data, parameters, state, state_cell
  EXPECT_EQ(rnn.HostInputsOf(ParseAttrs(rnn, gru)), std::vector<int>{3});
  EXPECT_TRUE(rnn.HostInputsOf(ParseAttrs(rnn, plain)).empty());
  const RnnSlots s = RnnSlotsOf(ParseAttrs(rnn, gru).Get<RnnParam>());
  EXPECT_EQ(backward.HostInputsOf(ParseAttrs(backward, gru)),
            std::vector<int>{s.BackwardInput(s.lengths)});
  EXPECT_STREQ(rnn.CaptureBarrier(DeviceType::kGpu, ParseAttrs(rnn, gru)), Op::kReadsHostInputs);
  EXPECT_STREQ(backward.CaptureBarrier(DeviceType::kGpu, ParseAttrs(backward, gru)),
               Op::kReadsHostInputs);
  EXPECT_EQ(rnn.CaptureBarrier(DeviceType::kGpu, ParseAttrs(rnn, plain)), nullptr);
  EXPECT_EQ(rnn.CaptureBarrier(DeviceType::kCpu, ParseAttrs(rnn, gru)), nullptr);
  const Symbol g = Symbol::Op("RNN", {Symbol::Variable("x")}, gru, "g");
  EXPECT_EQ(Executor::HostArguments(g), std::vector<std::string>{"g_sequence_length"});
  EXPECT_TRUE(
      Executor::HostArguments(Symbol::Op("RNN", {Symbol::Variable("x")}, plain, "g")).empty());
}

TEST_F(RnnDefinition, LengthsPastTheDataAndMixedDtypesAreErrors) {
  Config c;
  c.lengths = true;
  const Problem p = MakeProblem(c, 23);
  std::vector<NDArray> in = InputsOf(c, p, DType::kFloat32);
  in.back() = NDArray::FromVector(std::vector<int32_t>{4, 5, 1}, Shape{3},
                                  Device::Cpu());  // int32, one past T = 4
  std::string message;
  try {
    Invoke("RNN", in, AttrsOf(c))[0].WaitToRead();
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("sequence_length[1] is 5, expected a length in [1, 4]"), std::string::npos)
      << message;
  in.back() = NDArray::FromVector(std::vector<int32_t>{4, 2, 1}, Shape{3}, Device::Cpu());
  EXPECT_EQ(Invoke("RNN", in, AttrsOf(c))[0].shape(), (Shape{4, 3, 4}));  // int32 lengths are fine
  in[1] = ArrayOf(p.args.at("parameters"), Shape{ParamSize(c)}, DType::kFloat64);
  EXPECT_THROW(
      {
        try {
          Invoke("RNN", in, AttrsOf(c));
        } catch (const Error& e) {
          EXPECT_NE(
              std::string(e.what()).find("parameters must be float32 like data, found float64"),
              std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
}

TEST_F(RnnDefinition, ABackwardWithoutATrainingForwardIsAnError) {
  if (TestDevice().is_gpu())
    GTEST_SKIP() << "the CPU's reserve says whether a training forward wrote it";
  Config c;
  const Problem p = MakeProblem(c, 29);
  for (DType dtype : TestFloatTypes()) {
    const std::vector<NDArray> in = InputsOf(c, p, dtype);
    const std::vector<NDArray> out = Invoke("RNN", in, AttrsOf(c), {.is_train = false});
    std::string message;
    try {
      ImperativeGradients(c, p, dtype, in, out);
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("the reserve was not written by a training forward"), std::string::npos)
        << message;
  }
}

// ---- inference keeps the converted weights while the parameters do not change ----

TEST_F(Rnn, InferenceReusesConvertedWeightsOnlyWhileTheParametersAreUnchanged) {
  Config c;
  c.layers = 2, c.bidirectional = true, c.random_states = true;
  for (RnnMode mode : {RnnMode::kLstm, RnnMode::kGru, RnnMode::kRnnRelu}) {
    c.mode = mode;
    const Problem p = MakeProblem(c, 31), q = MakeProblem(c, 37);
    std::vector<NDArray> in = InputsOf(c, p, DType::kFloat32);
    const std::vector<double> first = ValuesOf(Invoke("RNN", in, AttrsOf(c))[0]);
    ExpectNear(ValuesOf(Invoke("RNN", in, AttrsOf(c))[0]), first, 0, "the same parameters again");
    const std::vector<double> changed = q.args.at("parameters");
    in[1].CopyFrom(
        std::vector<float>(changed.begin(), changed.end()));  // the same buffer, new values
    Problem r = p;
    r.args["parameters"] = changed;
    ExpectNear(ValuesOf(Invoke("RNN", in, AttrsOf(c))[0]),
               RunBound(c, Unrolled(c).Build(), r, DType::kFloat32).outputs[0], 2e-5,
               std::string(RnnModeName(mode)) + ": new parameters in the same buffer");
  }
}

// ---- PyTorch's state_dict ----

TEST_F(RnnParameters, SplitAndBuildUsePyTorchsNamesShapesAndOrder) {
  const AttrMap attrs = {
      {"mode", "lstm"}, {"state_size", "4"}, {"num_layers", "2"}, {"bidirectional", "true"}};
  const int64_t p = 2 * 16 * (5 + 4 + 2) + 2 * 16 * (8 + 4 + 2);
  const NDArray flat = NDArray::Arange(p, 0, 1, TestDevice());
  const std::map<std::string, NDArray> named = SplitRnnParameters(attrs, 5, flat, "lstm.");
  std::vector<std::pair<std::string, Shape>> want;
  for (int l = 0; l < 2; ++l)
    for (const char* dir : {"", "_reverse"}) {
      const std::string suffix = "_l" + std::to_string(l) + dir;
      want.push_back({"lstm.weight_ih" + suffix, Shape{16, l == 0 ? 5 : 8}});
      want.push_back({"lstm.weight_hh" + suffix, Shape{16, 4}});
      want.push_back({"lstm.bias_ih" + suffix, Shape{16}});
      want.push_back({"lstm.bias_hh" + suffix, Shape{16}});
    }
  ASSERT_EQ(named.size(), want.size());
  float next = 0;  // the tensors follow one another in PyTorch's order
  for (const auto& [name, shape] : want) {
    ASSERT_TRUE(named.count(name)) << name;
    EXPECT_EQ(named.at(name).shape(), shape) << name;
    EXPECT_EQ(named.at(name).ToVector<float>()[0], next) << name;
    next += static_cast<float>(shape.Size());
  }
  named.at("lstm.bias_hh_l1_reverse").Fill(-1);  // a view: writes the vector
  EXPECT_EQ(flat.ToVector<float>().back(), -1);
  const NDArray built = BuildRnnParameters(attrs, 5, named, "lstm.");
  EXPECT_EQ(built.ToVector<float>(), flat.ToVector<float>());
}

TEST_F(RnnParameters, BuildSaysWhichTensorIsMissingOrWrong) {
  const AttrMap attrs = {{"mode", "gru"}, {"state_size", "3"}, {"num_layers", "2"}};
  const NDArray flat(Shape{9 * (4 + 3 + 2) + 9 * (3 + 3 + 2)}, TestDevice());
  flat.Fill(1);
  auto expect_error = [&](std::map<std::string, NDArray> tensors, const std::string& part) {
    try {
      BuildRnnParameters(attrs, 4, tensors, "gru.");
      ADD_FAILURE() << "no error; expected one saying: " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  const std::map<std::string, NDArray> named = SplitRnnParameters(attrs, 4, flat, "gru.");
  auto without = named;
  without.erase("gru.weight_hh_l1");
  expect_error(without, "no tensor 'gru.weight_hh_l1'; expected (9, 3)");
  auto wrong = named;
  wrong["gru.bias_ih_l0"] = NDArray(Shape{6}, TestDevice());
  expect_error(wrong, "tensor 'gru.bias_ih_l0' must be (9,), found (6,)");
  auto extra = named;
  extra["gru.weight_ih_l2"] = NDArray(Shape{9, 3}, TestDevice());
  expect_error(extra, "tensor 'gru.weight_ih_l2' is not a parameter of this RNN");
  auto mixed = named;
  mixed["gru.weight_ih_l1"] = NDArray(Shape{9, 3}, TestDevice(), DType::kFloat64);
  expect_error(mixed, "tensor 'gru.weight_ih_l1' is NDArray (9, 3) float64");
  try {
    SplitRnnParameters(attrs, 4, NDArray(Shape{10}, TestDevice()));
    ADD_FAILURE() << "no error for a vector of the wrong size";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameters must be (153,), found (10,)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace weft::testing
