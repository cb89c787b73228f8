// Fuzz target: weft::ImportOnnx of any bytes as a model file, and what an imported model can do:
// its graph's JSON round-trips, and where the file declares every input's extents (small ones), it
// binds on the CPU and runs forward, or is refused with a weft::Error.
#include <string>

#include "core/error.h"
#include "executor/executor.h"
#include "fuzz/targets.h"
#include "weft/onnx.h"

namespace weft::fuzz {
namespace {

constexpr int64_t kMaxElements = 1 << 16;  // of an input or a parameter the run may touch

// Binds the model with every declared input filled with ones and runs it forward, when every
// input's extents are given and small, as are the parameters.
void BindAndRun(const OnnxModel& m) {
  Executor::ArrayMap args;
  for (const auto& [name, a] : m.params) {
    if (a.shape().Size() > kMaxElements) return;
    args[name] = a;
  }
  for (const OnnxTensorInfo& in : m.inputs) {
    int64_t n = 1;
    for (int64_t d : in.dims) {
      if (d < 0 || d > kMaxElements || (n *= d) > kMaxElements) return;
    }
    if (in.dtype != DType::kFloat32) return;
    NDArray x(Shape(in.dims), Device::Cpu());
    x.Fill(1);
    args[in.name] = x;
  }
  std::unique_ptr<Executor> exec = Executor::Bind(m.symbol, Device::Cpu(), args);
  exec->Forward(/*is_train=*/false);
  for (const NDArray& out : exec->outputs()) out.WaitToRead();
}

}  // namespace

int Onnx(const uint8_t* data, size_t size) {
  static const TempFile file("model.onnx");
  file.Write(data, size);
  OnnxModel m;
  try {
    m = ImportOnnx(file.path());
  } catch (const Error&) {
    return 0;  // refused, with a message
  }
  const std::string json = m.symbol.ToJson();
  if (Symbol::FromJson(json).ToJson() != json) Fail("an imported graph's JSON does not round-trip");
  try {
    BindAndRun(m);
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace weft::fuzz
