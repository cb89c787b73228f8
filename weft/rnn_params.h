// The RNN op's flat parameter vector and PyTorch's state_dict: split the vector into arrays named
// as PyTorch names them (weight_ih_l0, weight_hh_l0_reverse, bias_ih_l1, ...), and build it from
// such arrays, so weights saved from nn.LSTM, nn.GRU or nn.RNN (as safetensors) load and give
// PyTorch's outputs. The layout is PyTorch's own (ops/nn/rnn_params.h), so both are plain copies.
//
//   const AttrMap attrs = {{"mode", "lstm"}, {"state_size", "128"}, {"bidirectional", "true"}};
//   std::map<std::string, NDArray> saved = Load("lstm.safetensors");   // torch: lstm.weight_ih_l0,
//   ... NDArray flat = BuildRnnParameters(attrs, /*input_size=*/64, saved, "lstm.");
//   std::map<std::string, NDArray> named = SplitRnnParameters(attrs, 64, flat);   // views of flat
//   Save("for_torch.safetensors", named);   // loads into nn.LSTM(64, 128, bidirectional=True)
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ops/attrs.h"
#include "storage/ndarray.h"

namespace weft {

// The tensors of `flat`, the parameter vector of an RNN op with these attributes on data of
// `input_size` features, as views of it (writing one writes `flat`), keyed by `prefix` + PyTorch's
// name. Throws weft::Error when `flat` is not (P,) for these attributes, saying how P is made up.
std::map<std::string, NDArray> SplitRnnParameters(const AttrMap& attrs, int64_t input_size,
                                                  const NDArray& flat,
                                                  const std::string& prefix = "");

// A new parameter vector (P,) for these attributes, on the device and of the dtype of the tensors,
// filled from `tensors`[prefix + name] for every PyTorch name. Throws weft::Error naming the tensor
// that is missing, has another shape (saying the expected one), dtype or device, and naming any
// weight_* or bias_* tensor under `prefix` that the attributes leave unused (more layers than
// num_layers, a projection).
NDArray BuildRnnParameters(const AttrMap& attrs, int64_t input_size,
                           const std::map<std::string, NDArray>& tensors,
                           const std::string& prefix = "");

}  // namespace weft
