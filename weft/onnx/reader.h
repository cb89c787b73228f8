// Reading an ONNX file with the protobuf library and ONNX's own schema (Debian's libonnx-dev:
// onnx-ml.pb.h and libonnx_proto): the model, and each TensorProto as a HostTensor, its data
// inline (raw_data or the typed fields) or in an external file beside the model. Every failure
// is a weft::Error saying what was expected and what the file holds.
#pragma once

#include <onnx/onnx_pb.h>  // onnx-ml.pb.h (ONNX_ML, set by //tools/deps:onnx_proto)

#include <string>

#include "weft/onnx/tensor.h"

namespace weft::onnx_import {

// The model in `path`: a file that parses as an onnx.ModelProto with a graph.
onnx::ModelProto ReadModel(const std::string& path);

// The tensor's dtype, dims and data; `dir` is the model's folder, where external data lives.
HostTensor TensorOf(const onnx::TensorProto& t, const std::string& dir);

// ONNX's element type as weft's dtype (an error naming the ONNX type where weft has none).
DType DTypeOfOnnx(int32_t onnx_type, const std::string& what);

}  // namespace weft::onnx_import
