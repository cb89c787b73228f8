// batch_dot, matmul and _backward_batch_dot (ops/nn/batch_dot.cc). Declarative cases against a
// float64 reference of numpy's matmul (every transpose combination, 2-D to 4-D operands, batch
// axes broadcast each way), each with its finite-difference gradient (op_test_util.h); PyTorch's
// torch.matmul (tests/matmul_torch_cases.h); every backward request, with and without summed
// broadcast axes; bfloat16 against float32; and bad input. On a GPU (gpu_ops_matmul_test) the same
// tests compare the GPU with the CPU and the references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "storage/ndarray.h"
#include "tests/matmul_torch_cases.h"
#include "tests/op_test_util.h"
#include "weft/imperative.h"

namespace weft::testing {
namespace {

// ---- The reference ----

struct Operands {
  Shape a, b;  // as stored
  bool ta = false, tb = false;
};

// The shape with leading axes of extent 1 up to `rank` axes.
std::vector<int64_t> Padded(const Shape& s, int rank) {
  std::vector<int64_t> d(rank - s.ndim(), 1);
  d.insert(d.end(), s.dims().begin(), s.dims().end());
  return d;
}

// The row-major offset of batch index `at` (of the output's batch axes) in an operand of padded
// batch extents `dims` (extent 1: broadcast).
int64_t BatchOffset(const std::vector<int64_t>& dims, const std::vector<int64_t>& at,
                    int64_t matrix) {
  int64_t offset = 0;
  for (size_t j = 0; j < at.size(); ++j) offset = offset * dims[j] + (dims[j] == 1 ? 0 : at[j]);
  return offset * matrix;
}

// numpy's matmul of op(a) and op(b), op a transpose of the last two axes where asked.
Values Matmul(const Operands& o, const Values& a, const Values& b, Shape* out_shape = nullptr) {
  const int rank = std::max(o.a.ndim(), o.b.ndim());
  const std::vector<int64_t> da = Padded(o.a, rank), db = Padded(o.b, rank);
  const int64_t ra = da[rank - 2], ca = da[rank - 1], rb = db[rank - 2], cb = db[rank - 1];
  const int64_t m = o.ta ? ca : ra, k = o.ta ? ra : ca, n = o.tb ? rb : cb;
  std::vector<int64_t> batch;
  for (int j = 0; j < rank - 2; ++j) batch.push_back(std::max(da[j], db[j]));
  int64_t count = 1;
  for (int64_t e : batch) count *= e;
  Values y(count * m * n);
  std::vector<int64_t> at(batch.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t j = static_cast<int64_t>(batch.size()) - 1, r = i; j >= 0; --j)
      at[j] = r % batch[j], r /= batch[j];
    const double* pa = a.data() + BatchOffset({da.begin(), da.end() - 2}, at, ra * ca);
    const double* pb = b.data() + BatchOffset({db.begin(), db.end() - 2}, at, rb * cb);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        double sum = 0;
        for (int64_t l = 0; l < k; ++l)
          sum += (o.ta ? pa[l * m + r] : pa[r * k + l]) * (o.tb ? pb[c * k + l] : pb[l * n + c]);
        y[(i * m + r) * n + c] = sum;
      }
    }
  }
  if (out_shape) {
    batch.insert(batch.end(), {m, n});
    *out_shape = Shape(std::span<const int64_t>(batch));
  }
  return y;
}

AttrMap AttrsOf(const Operands& o) {
  return {{"transpose_a", o.ta ? "true" : "false"}, {"transpose_b", o.tb ? "true" : "false"}};
}

OpCase ProductCase(const std::string& op, const Operands& o) {
  OpCase c{op, op == "matmul" ? AttrMap{} : AttrsOf(o), {o.a, o.b}, [o](const Inputs& in) {
             return Outputs{Matmul(o, in[0], in[1])};
           }};
  c.tolerance = 2e-5;
  c.name = op + " a " + o.a.ToString() + (o.ta ? "^T" : "") + " b " + o.b.ToString() +
           (o.tb ? "^T" : "");
  return c;
}

// ---- Declarative cases ----

TEST(BatchDot, EveryTransposeCombinationOfMatrices) {
  RunOpCase(ProductCase("batch_dot", {Shape{3, 4}, Shape{4, 5}}));
  RunOpCase(ProductCase("batch_dot", {Shape{4, 3}, Shape{4, 5}, true, false}));
  RunOpCase(ProductCase("batch_dot", {Shape{3, 4}, Shape{5, 4}, false, true}));
  RunOpCase(ProductCase("batch_dot", {Shape{4, 3}, Shape{5, 4}, true, true}));
}

TEST(BatchDot, BatchesOfThreeAndFourAxes) {
  RunOpCase(ProductCase("batch_dot", {Shape{2, 3, 4}, Shape{2, 4, 2}}));
  RunOpCase(ProductCase("batch_dot", {Shape{2, 4, 3}, Shape{2, 2, 4}, true, true}));
  // Attention's scores (B, H, T, D) x (B, H, T, D)^T and its values (B, H, T, T) x (B, H, T, D).
  RunOpCase(ProductCase("batch_dot", {Shape{2, 2, 3, 4}, Shape{2, 2, 3, 4}, false, true}));
  RunOpCase(ProductCase("batch_dot", {Shape{2, 2, 3, 3}, Shape{2, 2, 3, 4}}));
}

TEST(BatchDot, BroadcastBatchAxesSumTheirGradients) {
  RunOpCase(ProductCase("batch_dot", {Shape{2, 3, 4}, Shape{4, 2}}));                  // b shared
  RunOpCase(ProductCase("batch_dot", {Shape{4, 3}, Shape{2, 4, 2}, true, false}));     // a shared
  RunOpCase(ProductCase("batch_dot", {Shape{2, 2, 3, 4}, Shape{2, 4}, false, true}));  // both axes
  RunOpCase(ProductCase("batch_dot", {Shape{2, 1, 3, 4}, Shape{3, 4, 2}}));  // each its own axis
  RunOpCase(ProductCase("batch_dot", {Shape{1, 3, 4, 2}, Shape{2, 1, 4, 3}, true, false}));
  RunOpCase(ProductCase("batch_dot", {Shape{2, 3, 2, 4}, Shape{2, 1, 3, 4}, false, true}));
}

TEST(Matmul, IsBatchDotWithoutTransposes) {
  RunOpCase(ProductCase("matmul", {Shape{3, 4}, Shape{4, 2}}));
  RunOpCase(ProductCase("matmul", {Shape{2, 3, 4}, Shape{4, 2}}));
  RunOpCase(ProductCase("matmul", {Shape{2, 1, 3, 4}, Shape{3, 4, 2}}));
}

TEST(Matmul, OutputShapesFollowNumpysBroadcast) {
  const std::vector<std::pair<Operands, Shape>> cases = {
      {{Shape{5, 3, 4}, Shape{4, 6}}, Shape{5, 3, 6}},
      {{Shape{4, 6}, Shape{5, 6, 2}}, Shape{5, 4, 2}},
      {{Shape{2, 1, 3, 4}, Shape{7, 4, 5}}, Shape{2, 7, 3, 5}},
      {{Shape{8, 3, 4}, Shape{2, 1, 4, 5}}, Shape{2, 8, 3, 5}},
  };
  for (const auto& [o, want] : cases) {
    NDArray a(o.a, TestDevice()), b(o.b, TestDevice());
    EXPECT_EQ(Invoke("matmul", {a, b})[0].shape(), want) << o.a << " x " << o.b;
    EXPECT_EQ(Invoke("batch_dot", {a, b})[0].shape(), want) << o.a << " x " << o.b;
  }
}

// ---- Calls ----

// The output and the gradients (d_a, d_b) of one call of `op` in `dtype` on `device`, the
// gradients with `req` into arrays holding 0.25 (kNull ones stay so).
std::vector<Values> CallAndBackward(const std::string& op, const Operands& o, const Values& a,
                                    const Values& b, const Values& dy, DType dtype, Device device,
                                    std::vector<OpReq> req = {OpReq::kWrite, OpReq::kWrite}) {
  const Op& def = GetOp(op);
  const Attrs attrs = ParseAttrs(def, op == "matmul" ? AttrMap{} : AttrsOf(o));
  const std::vector<NDArray> in = {ArrayOf(a, o.a, dtype, device), ArrayOf(b, o.b, dtype, device)};
  const std::vector<NDArray> out = Invoke(def, attrs, in);
  std::vector<NDArray> grads = {NDArray(o.a, device, dtype), NDArray(o.b, device, dtype)};
  for (NDArray& g : grads) g.Fill(0.25);
  InvokeBackward(def, attrs, in, out, {ArrayOf(dy, out[0].shape(), dtype, device)}, grads, req);
  return {ValuesOf(out[0]), ValuesOf(grads[0]), ValuesOf(grads[1])};
}

// ---- PyTorch ----

double TolOf(DType t) { return t == DType::kFloat64 ? 1e-12 : 1e-5; }

// torch.matmul on the same inputs (tests/matmul_torch_cases.py): the output and the gradients of
// sum(y * gy), in every dtype TestDevice() tests, through batch_dot and (without transposes)
// matmul.
TEST(BatchDot, GivesPyTorchsOutputsAndGradients) {
  for (const matmul_torch::Case& tc : matmul_torch::Cases()) {
    const Operands o{Shape(std::span(tc.a_shape)), Shape(std::span(tc.b_shape)), tc.transpose_a,
                     tc.transpose_b};
    std::vector<std::string> ops = {"batch_dot"};
    if (!o.ta && !o.tb) ops.push_back("matmul");
    for (const std::string& op : ops) {
      for (DType t : TestFloatTypes()) {
        const std::string what = op + " " + tc.name + " " + DTypeName(t).data();
        const std::vector<Values> got = CallAndBackward(op, o, tc.a, tc.b, tc.gy, t, TestDevice());
        ExpectNear(got[0], tc.y, TolOf(t), what + " output");
        ExpectNear(got[1], tc.da, TolOf(t), what + " d_a");
        ExpectNear(got[2], tc.db, TolOf(t), what + " d_b");
      }
    }
  }
}

// ---- Backward requests ----

TEST(BatchDot, BackwardHonoursEachRequestOnItsOwn) {
  const std::vector<std::vector<OpReq>> requests = {{OpReq::kNull, OpReq::kWrite},
                                                    {OpReq::kWrite, OpReq::kNull},
                                                    {OpReq::kAddTo, OpReq::kNull},
                                                    {OpReq::kNull, OpReq::kAddTo},
                                                    {OpReq::kAddTo, OpReq::kWrite}};
  const std::vector<Operands> operands = {{Shape{2, 4, 3}, Shape{2, 4, 2}, true, false},
                                          {Shape{2, 3, 4}, Shape{2, 4}, false, true},  // summed
                                          {Shape{2, 1, 3, 4}, Shape{3, 4, 2}}};        // summed
  for (DType t : TestFloatTypes()) {
    for (const Operands& o : operands) {
      Shape out;
      const Values a = Uniform(o.a.Size(), 1), b = Uniform(o.b.Size(), 2);
      Matmul(o, a, b, &out);
      const Values dy = Uniform(out.Size(), 3);
      const std::vector<Values> want = CallAndBackward("batch_dot", o, a, b, dy, t, TestDevice());
      for (const std::vector<OpReq>& req : requests) {
        const std::vector<Values> got =
            CallAndBackward("batch_dot", o, a, b, dy, t, TestDevice(), req);
        for (int g = 0; g < 2; ++g) {
          Values expected(want[1 + g].size(), 0.25);
          for (size_t k = 0; k < expected.size(); ++k) {
            if (req[g] == OpReq::kWrite) expected[k] = want[1 + g][k];
            if (req[g] == OpReq::kAddTo) expected[k] += want[1 + g][k];
          }
          ExpectNear(got[1 + g], expected, TolOf(t),
                     "a " + o.a.ToString() + " b " + o.b.ToString() + " gradient " +
                         std::to_string(g) + " request " +
                         std::to_string(static_cast<int>(req[g])));
        }
      }
    }
  }
}

// ---- bfloat16 ----

// bfloat16 on TestDevice() against float32 on the CPU on the same bf16-exact values: products
// accumulate in float32 and round once to bfloat16 (2^-9 relative), a summed gradient twice.
TEST(BatchDot, Bfloat16AccumulatesInFloat32) {
  const std::vector<Operands> operands = {{Shape{3, 8}, Shape{8, 5}},
                                          {Shape{2, 2, 8, 3}, Shape{2, 2, 5, 8}, true, true},
                                          {Shape{2, 3, 8}, Shape{8, 4}},
                                          {Shape{2, 1, 3, 8}, Shape{3, 4, 8}, false, true}};
  for (const Operands& o : operands) {
    Shape out;
    const Values a = Bf16Exact(Uniform(o.a.Size(), 4)), b = Bf16Exact(Uniform(o.b.Size(), 5));
    Matmul(o, a, b, &out);
    const Values dy = Bf16Exact(Uniform(out.Size(), 6));
    const std::vector<Values> want =
        CallAndBackward("batch_dot", o, a, b, dy, DType::kFloat32, Device::Cpu());
    const std::vector<Values> got =
        CallAndBackward("batch_dot", o, a, b, dy, DType::kBFloat16, TestDevice());
    const char* names[] = {"output", "d_a", "d_b"};
    for (int k = 0; k < 3; ++k) {
      // Relative to the values' scale: a sum of k products of values in [-1, 1].
      ExpectNear(
          got[k], want[k], 1.6e-2,
          std::string("bfloat16 ") + names[k] + " a " + o.a.ToString() + " b " + o.b.ToString());
    }
  }
}

// ---- Bad input ----

TEST(BatchDot, BadInputsSayWhatWasExpected) {
  ExpectOpError("batch_dot", {}, {Shape{2, 3, 4}, Shape{2, 5, 6}},
                {"batch_dot", "inner extents differ", "has k = 4", "found k = 5"});
  ExpectOpError("batch_dot", {{"transpose_a", "true"}}, {Shape{3, 4}, Shape{4, 5}},
                {"batch_dot", "transpose_a true", "has k = 3", "found k = 4"});
  ExpectOpError("matmul", {}, {Shape{2, 3, 4, 5}, Shape{3, 3, 5, 4}},
                {"matmul", "do not broadcast", "expected equal extents or 1", "found 2 and 3"});
  ExpectOpError("matmul", {}, {Shape{4}, Shape{4, 5}},
                {"matmul", "a must have 2 to 4 axes, found (4,)"});
  ExpectOpError("batch_dot", {}, {Shape{3, 4}, Shape{1, 2, 3, 4, 5}},
                {"batch_dot", "b must have 2 to 4 axes, found (1, 2, 3, 4, 5)"});
  ExpectOpError("batch_dot", {}, {Shape{0, 4}, Shape{4, 5}},
                {"batch_dot", "a must be non-empty, found (0, 4)"});
  ExpectOpError("batch_dot", {{"transpose_b", "maybe"}}, {Shape{3, 4}, Shape{4, 5}},
                {"batch_dot", "transpose_b", "'maybe'"});
  ExpectOpError("matmul", {{"transpose_a", "true"}}, {Shape{3, 4}, Shape{4, 5}},
                {"matmul", "transpose_a"});
}

TEST(BatchDot, OperandsOfDifferentDtypesAreAnError) {
  const NDArray a(Shape{2, 3}, TestDevice(), DType::kFloat32),
      b(Shape{3, 2}, TestDevice(), DType::kFloat64);
  try {
    Invoke("batch_dot", {a, b});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("found float64 for input 1"), std::string::npos)
        << e.what();
  }
}

TEST(BatchDot, IntegerOperandsAreAnErrorAtWaitToRead) {
  const NDArray a(Shape{2, 3}, TestDevice(), DType::kInt32),
      b(Shape{3, 2}, TestDevice(), DType::kInt32);
  a.Fill(1), b.Fill(1);
  const NDArray y = Invoke("batch_dot", {a, b})[0];
  try {
    y.WaitToRead();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const char* part : {"batch_dot", "expected float32", "found int32"})
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weft::testing
