// The inputs and PyTorch's outputs tests/onnx/export_models.py writes beside each model
// (NAME.json), read for the ONNX tests (onnx_import_test, gpu_onnx_test):
//
//   {"input": [floats], "input_shape": [dims], "output": [...], "output_shape": [...]}
//   {"inputs": {NAME: {"values": [...], "shape": [dims], "dtype": "float32" | "bool" | "int64"}},
//    ...}
//
// The first form feeds the model's first input; "output" is absent for a hand-made model (ONNX
// Runtime is its reference).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/shape.h"
#include "storage/ndarray.h"
#include "weft/onnx.h"

namespace weft::testing {

struct OnnxInput {
  std::vector<double> values;
  Shape shape;
  DType dtype = DType::kFloat32;  // float32, bool or int64 (token ids)
};

struct OnnxCase {
  std::map<std::string, OnnxInput> inputs;  // by name; "" for the model's first input
  std::vector<float> output;                // PyTorch's; empty where the script wrote none
  Shape output_shape;
};

OnnxCase ReadOnnxCase(const std::string& json_path);

// The model's output 0 on the case's inputs, bound on `device` (its parameters copied there).
NDArray RunOnnxCase(const OnnxModel& m, const OnnxCase& c, Device device);

}  // namespace weft::testing
