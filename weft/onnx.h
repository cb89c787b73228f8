// Running models trained elsewhere: ONNX import. A file exported by PyTorch (torch.onnx.export)
// or any other producer becomes an ordinary weft graph, bound, run, saved and optimized (CSE,
// fusion, BatchNorm folding, memory planning) like any other:
//
//   weft::OnnxModel m = weft::ImportOnnx("resnet18.onnx");
//   auto args = m.params;                                  // the initializers, by name (CPU)
//   args[m.inputs[0].name] = images;                        // (N, 3, 224, 224)
//   auto exec = weft::Executor::Bind(m.symbol, weft::Device::Cpu(), args);
//   exec->Forward(false);                                   // exec->outputs()[0]: the logits
//
// The file is read with the protobuf library against ONNX's own schema (Debian's libonnx-dev);
// tensors in external data files beside the model load too. Opsets 11 to 17, the default domain.
// Known tensors (initializers, Constant nodes) flow through shape arithmetic at import, so the
// bound graph holds none of it; what the graph reads at run time becomes a parameter. Anything
// weft cannot run is a weft::Error naming the node, its op type and the opset (an unknown op also
// lists the supported ones), an attribute value weft does not run names the attribute; a
// truncated or foreign file says what was expected. Link //weft:onnx.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "graph/symbol.h"
#include "storage/ndarray.h"

namespace weft {

// A graph input or output as the file declares it: its element type and extents, a symbolic
// extent (a batch axis "N") as -1 with its name in dim_names.
struct OnnxTensorInfo {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  std::vector<std::string> dim_names;  // "" where the extent is a number
};

struct OnnxOptions {};

struct OnnxModel {
  Symbol symbol;                          // the graph's outputs, in the file's order
  std::map<std::string, NDArray> params;  // every parameter the graph reads (CPU arrays)
  std::vector<OnnxTensorInfo> inputs;     // the inputs to feed (initializers left out)
  std::vector<OnnxTensorInfo> outputs;
  int64_t opset = 0;     // of the default domain
  std::string producer;  // "pytorch 1.13.1"
};

// The operators ImportOnnx converts, sorted.
std::vector<std::string> SupportedOnnxOps();

OnnxModel ImportOnnx(const std::string& path, const OnnxOptions& options = {});

}  // namespace weft
