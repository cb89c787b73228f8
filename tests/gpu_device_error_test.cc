// Errors GPU kernels find in their inputs (engine/gpu/device_error.h): a label that is not a class
// in SoftmaxCrossEntropy, an index outside the table in Embedding. Each is the weft::Error the
// CPU compute throws (the op, the first bad row or position, its value, the range), raised by the
// next wait on the op's outputs and on the outputs of the ops that depend on them, never on
// others; WaitForAll raises one no wait raised, once; the device stays usable afterwards; valid
// input raises nothing; and ops whose kernels share one launch batch each report their own.
// Every scenario runs on the CPU too, and the GPU must say and do what the CPU does.
#include <gtest/gtest.h>

#include <cmath>
#include <exception>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/gpu/gpu_stream.h"
#include "ops/op.h"
#include "storage/ndarray.h"
#include "tests/gpu_op_test_util.h"
#include "tests/weft_test_util.h"
#include "weft/imperative.h"

namespace weft {
namespace {

using testing::ErrorMessage;

const Device kGpu = Device::Gpu(0);
const Device kCpu = Device::Cpu();
constexpr const char* kNoError = "<no error>";

// The message without the "file:line: " where it was thrown (the CPU's and the GPU's differ).
std::string Unlocated(const std::string& message) {
  const size_t at = message.find(": ");
  return message == kNoError || at == std::string::npos ? message : message.substr(at + 2);
}

std::string AtWaitToRead(const NDArray& a) {
  return Unlocated(ErrorMessage([&] { a.WaitToRead(); }));
}

std::string AtWaitForAll() {
  return Unlocated(ErrorMessage([] { engine::Engine::Get()->WaitForAll(); }));
}

// `values` as an array of `dtype` (float32 or float64) on `device`.
NDArray Array(const std::vector<double>& values, const Shape& shape, Device device, DType dtype) {
  if (dtype == DType::kFloat64) return NDArray::FromVector(values, shape, device);
  return NDArray::FromVector(std::vector<float>(values.begin(), values.end()), shape, device);
}

// Logits (rows, 4): row r is (r, 0, -r, 1) / 4.
NDArray Logits(int64_t rows, Device device, DType dtype) {
  std::vector<double> x;
  for (int64_t r = 0; r < rows; ++r) x.insert(x.end(), {r / 4.0, 0.0, -r / 4.0, 0.25});
  return Array(x, Shape{rows, 4}, device, dtype);
}

const AttrMap kEmbedding = {{"input_dim", "5"}, {"output_dim", "3"}};

NDArray Table(Device device, DType dtype) {
  std::vector<double> w(15);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<double>(i);
  return Array(w, Shape{5, 3}, device, dtype);
}

// What each way of calling the checked ops raises at WaitToRead on its output, for `bad` (the
// labels of 3 rows of 4 classes, or 4 indices into 5 rows).
std::vector<std::string> CheckedOpErrors(Device device, DType dtype,
                                         const std::vector<double>& labels,
                                         const std::vector<double>& indices) {
  const NDArray x = Logits(3, device, dtype), label = Array(labels, Shape{3}, device, dtype);
  const NDArray ones = Array({1, 1, 1}, Shape{3}, device, dtype);
  const NDArray lse = Array({0, 0, 0}, Shape{3}, device, dtype);  // any values: labels fail first
  const NDArray data = Array(indices, Shape{4}, device, dtype), table = Table(device, dtype);
  const NDArray dy = Array(std::vector<double>(12, 1), Shape{4, 3}, device, dtype);
  return {AtWaitToRead(Invoke("SoftmaxCrossEntropy", {x, label})[0]),
          AtWaitToRead(Invoke("_backward_SoftmaxCrossEntropy", {ones, x, label, lse})[0]),
          AtWaitToRead(Invoke("Embedding", {data, table}, kEmbedding)[0]),
          AtWaitToRead(Invoke("_backward_Embedding", {dy, data}, kEmbedding)[0])};
}

TEST(GpuDeviceErrors, BadLabelsAndIndicesRaiseTheCpuErrorAtWaitToRead) {
  const double nan = std::nan("");
  // Labels: a class too far, a negative one, a fraction, NaN; indices: past the end, negative,
  // NaN. Each in row or position 1, after a valid one.
  const std::vector<std::vector<double>> labels = {{0, 4, 1}, {0, -1, 1}, {0, 1.5, 1}, {0, nan, 1}};
  const std::vector<std::vector<double>> indices = {{0, 5, 1, 2}, {0, -2, 1, 2}, {0, nan, 1, 2}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (size_t i = 0; i < labels.size(); ++i) {
      const std::vector<double>& index = indices[i % indices.size()];
      const std::vector<std::string> cpu = CheckedOpErrors(kCpu, dtype, labels[i], index);
      for (const std::string& message : cpu) ASSERT_NE(message, kNoError);
      EXPECT_NE(cpu[0].find("SoftmaxCrossEntropy: label of row 1 is"), std::string::npos) << cpu[0];
      EXPECT_NE(cpu[2].find("Embedding: index"), std::string::npos) << cpu[2];
      EXPECT_NE(cpu[2].find("at position 1 of data is out of range"), std::string::npos) << cpu[2];
      EXPECT_EQ(CheckedOpErrors(kGpu, dtype, labels[i], index), cpu) << dtype << ", case " << i;
    }
  }
}

TEST(GpuDeviceErrors, OfSeveralBadRowsTheFirstIsNamed) {
  // 20,000 rows over many blocks; bad labels at rows 17,000, 9,123 and 12,000.
  std::vector<double> labels(20000, 2);
  labels[17000] = 7, labels[9123] = -3, labels[12000] = 4;
  std::vector<std::string> messages;
  for (Device device : {kCpu, kGpu}) {
    const NDArray loss =
        Invoke("SoftmaxCrossEntropy", {Logits(20000, device, DType::kFloat32),
                                       Array(labels, Shape{20000}, device, DType::kFloat32)})[0];
    messages.push_back(AtWaitToRead(loss));
  }
  EXPECT_NE(messages[0].find("label of row 9123 is -3"), std::string::npos) << messages[0];
  EXPECT_EQ(messages[1], messages[0]);
}

TEST(GpuDeviceErrors, ValidInputRaisesNothing) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    EXPECT_EQ(CheckedOpErrors(kGpu, dtype, {0, 3, 2.0}, {4, 0, 2.9, 1}),
              std::vector<std::string>(4, kNoError));
  }
  EXPECT_EQ(AtWaitForAll(), kNoError);
}

// After a bad label, the same device runs later ops, checked or not, to the CPU's results.
TEST(GpuDeviceErrors, TheDeviceStaysUsable) {
  const NDArray x = Logits(3, kGpu, DType::kFloat32);
  const NDArray bad =
      Invoke("SoftmaxCrossEntropy", {x, Array({0, 9, 1}, Shape{3}, kGpu, DType::kFloat32)})[0];
  ASSERT_NE(AtWaitToRead(bad), kNoError);
  const NDArray good =
      Invoke("SoftmaxCrossEntropy", {x, Array({0, 3, 1}, Shape{3}, kGpu, DType::kFloat32)})[0];
  const NDArray on_cpu = Invoke(
      "SoftmaxCrossEntropy",
      {Logits(3, kCpu, DType::kFloat32), Array({0, 3, 1}, Shape{3}, kCpu, DType::kFloat32)})[0];
  const std::vector<float> got = good.ToVector<float>(), want = on_cpu.ToVector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  EXPECT_EQ(Invoke("relu", {x})[0].ToVector<float>()[4], 0.25f);
  EXPECT_EQ(AtWaitForAll(), kNoError);
}

// What the waits of a program around one failed op raise, in order: the op's output, waited for
// twice; ops that depend on it (on the device, a second one after, a copy to the host, a CPU op
// on the copy); an op that does not; WaitForAll after all of them.
std::vector<std::string> ErrorsAlongTheEdges(Device device) {
  const NDArray x = Logits(3, device, DType::kFloat32);
  const NDArray loss =
      Invoke("SoftmaxCrossEntropy", {x, Array({0, 1, 6}, Shape{3}, device, DType::kFloat32)})[0];
  const NDArray dependent = Invoke("relu", {loss})[0];
  const NDArray second = Invoke("neg", {dependent})[0];
  const NDArray copy = dependent.Copy(kCpu);
  const NDArray on_cpu = Invoke("relu", {copy})[0];
  const NDArray unrelated = Invoke("relu", {x})[0];
  return {AtWaitToRead(loss), AtWaitToRead(loss),   AtWaitToRead(dependent), AtWaitToRead(second),
          AtWaitToRead(copy), AtWaitToRead(on_cpu), AtWaitToRead(unrelated), AtWaitForAll()};
}

TEST(GpuDeviceErrors, TheErrorFollowsTheDependenciesAsOnTheCpu) {
  const std::vector<std::string> cpu = ErrorsAlongTheEdges(kCpu);
  const std::string error =
      "SoftmaxCrossEntropy: label of row 2 is 6, expected a class index in [0, 4)";
  EXPECT_EQ(cpu, (std::vector<std::string>{error, kNoError, error, error, error, error, kNoError,
                                           kNoError}));
  EXPECT_EQ(ErrorsAlongTheEdges(kGpu), cpu);
}

// No wait raised it: WaitForAll does, once, and retires it (a wait after raises nothing).
std::vector<std::string> ErrorsAfterWaitForAll(Device device) {
  const NDArray out = Invoke(
      "Embedding",
      {Array({3, 0, 8, 1}, Shape{4}, device, DType::kFloat32), Table(device, DType::kFloat32)},
      kEmbedding)[0];
  return {AtWaitForAll(), AtWaitToRead(out), AtWaitForAll()};
}

TEST(GpuDeviceErrors, WaitForAllRaisesAnErrorNoWaitRaisedOnce) {
  const std::vector<std::string> cpu = ErrorsAfterWaitForAll(kCpu);
  EXPECT_NE(cpu[0].find("Embedding: index 8 at position 2 of data is out of range"),
            std::string::npos)
      << cpu[0];
  EXPECT_EQ(cpu[1], kNoError);
  EXPECT_EQ(cpu[2], kNoError);
  EXPECT_EQ(ErrorsAfterWaitForAll(kGpu), cpu);
}

// ---- Slots within one launch batch ----

// A float32 array on the current GPU from host values.
struct DeviceArray {
  DeviceArray(const std::vector<float>& values, const Shape& shape)
      : buffer(values.size() * sizeof(float)), view(buffer.get(), shape, DType::kFloat32, kGpu) {
    buffer.Upload(values.data(), values.size() * sizeof(float));
  }
  testing::DeviceBuffer buffer;
  TensorView view;
};

// Runs `op`'s GPU compute on `stream` (its kernels are batched there), then takes the records of
// its checks, as its completion would.
gpu::DeviceErrors RunOn(engine::GpuStream& stream, const std::string& op, const AttrMap& attrs,
                        const std::vector<const DeviceArray*>& in,
                        const std::vector<const DeviceArray*>& out) {
  const Op& definition = GetOp(op);
  OpContext ctx;
  ctx.run.device = kGpu;
  ctx.run.stream = &stream;
  std::vector<TensorView> inputs, outputs;
  for (const DeviceArray* a : in) inputs.push_back(a->view);
  for (const DeviceArray* a : out) outputs.push_back(a->view);
  const std::vector<OpReq> req(out.size(), OpReq::kWrite);
  definition.On(DeviceType::kGpu).compute(ctx, ParseAttrs(definition, attrs), inputs, req, outputs);
  return stream.TakeErrors();
}

std::string FailureOf(const gpu::DeviceErrors& errors) {
  const std::exception_ptr error = errors.TakeFailure();
  return Unlocated(ErrorMessage([&] {
    if (error) std::rethrow_exception(error);
  }));
}

// Three checked ops, back to back on one stream, their kernels launched as one batch: the first
// and the third have bad input, each names its own.
std::vector<std::string> ThreeOpsInOneBatch(engine::GpuStream& stream) {
  const DeviceArray x({0, 1, 2, 3, 4, 5, 6, 7}, Shape{2, 4}), loss({0, 0}, Shape{2}),
      lse({0, 0}, Shape{2});
  const DeviceArray bad_label({0, 5}, Shape{2}), good_label({3, 2}, Shape{2});
  const DeviceArray bad_index({1, 0, -1}, Shape{3}), table({0, 1, 2, 3}, Shape{2, 2}),
      rows(std::vector<float>(6), Shape{3, 2});
  const AttrMap attrs = {{"input_dim", "2"}, {"output_dim", "2"}};
  const gpu::DeviceErrors first =
      RunOn(stream, "SoftmaxCrossEntropy", {}, {&x, &bad_label}, {&loss, &lse});
  const gpu::DeviceErrors second =
      RunOn(stream, "SoftmaxCrossEntropy", {}, {&x, &good_label}, {&loss, &lse});
  const gpu::DeviceErrors third = RunOn(stream, "Embedding", attrs, {&bad_index, &table}, {&rows});
  stream.Synchronize();
  return {FailureOf(first), FailureOf(second), FailureOf(third)};
}

TEST(GpuDeviceErrors, OpsInOneLaunchBatchEachReportTheirOwn) {
  testing::TestStream stream;
  ThreeOpsInOneBatch(stream.get());  // first uses of the records set them up (a memset each)
  const std::vector<std::string> messages = ThreeOpsInOneBatch(stream.get());
  EXPECT_EQ(
      messages,
      (std::vector<std::string>{
          "SoftmaxCrossEntropy: label of row 1 is 5, expected a class index in [0, 4)", kNoError,
          "Embedding: index -1 at position 2 of data is out of range: expected 0 <= index < 2 "
          "(input_dim)"}));
}

}  // namespace
}  // namespace weft
