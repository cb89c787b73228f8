#include "weft/rnn_params.h"

#include <set>
#include <vector>

#include "core/error.h"
#include "ops/nn/rnn_params.h"
#include "ops/op.h"

namespace weft {

namespace {

RnnParamLayout LayoutOf(const AttrMap& attrs, int64_t input_size, const char* caller) {
  if (input_size < 1) WEFT_THROW(caller << ": expected an input size >= 1, found " << input_size);
  const Op& op = GetOp("RNN");
  return RnnParamLayout(ParseAttrs(op, attrs).Get<RnnParam>(), input_size);
}

// The part of `flat` (P,) that holds `t`, seen with t's shape.
NDArray View(const NDArray& flat, const RnnTensor& t) {
  return flat.Slice(t.offset, t.offset + t.shape.Size()).Reshape(t.shape);
}

// The tensor named `name`, checked against `t` and the first tensor's dtype and device.
const NDArray& Checked(const std::map<std::string, NDArray>& tensors, const std::string& name,
                       const RnnTensor& t, const NDArray* first) {
  auto it = tensors.find(name);
  if (it == tensors.end() || it->second.is_none()) {
    WEFT_THROW("BuildRnnParameters: no tensor '" << name << "'; expected " << t.shape
                                                 << " for this RNN");
  }
  const NDArray& a = it->second;
  if (a.shape() != t.shape) {
    WEFT_THROW("BuildRnnParameters: tensor '" << name << "' must be " << t.shape << ", found "
                                              << a.shape());
  }
  if (first != nullptr && (a.dtype() != first->dtype() || a.device() != first->device())) {
    WEFT_THROW("BuildRnnParameters: tensor '" << name << "' is " << a.ToString() << "; expected "
                                              << first->dtype() << " on " << first->device()
                                              << " like the others");
  }
  return a;
}

// Tensors under `prefix` that look like RNN parameters but are not among `used`.
void CheckNoneLeft(const std::map<std::string, NDArray>& tensors, const std::string& prefix,
                   const std::set<std::string>& used) {
  for (const auto& [name, array] : tensors) {
    if (name.rfind(prefix, 0) != 0 || used.contains(name)) continue;
    const std::string rest = name.substr(prefix.size());
    if (rest.rfind("weight_", 0) == 0 || rest.rfind("bias_", 0) == 0) {
      WEFT_THROW("BuildRnnParameters: tensor '"
                 << name << "' is not a parameter of this RNN (num_layers, "
                 << "bidirectional and mode choose which are; projections are not "
                 << "supported)");
    }
  }
}

}  // namespace

std::map<std::string, NDArray> SplitRnnParameters(const AttrMap& attrs, int64_t input_size,
                                                  const NDArray& flat, const std::string& prefix) {
  const RnnParamLayout layout = LayoutOf(attrs, input_size, "SplitRnnParameters");
  if (flat.is_none()) WEFT_THROW("SplitRnnParameters: the parameter vector is a null array");
  if (flat.shape() != Shape{layout.size()}) {
    WEFT_THROW("SplitRnnParameters: parameters must be ("
               << layout.size() << ",), found " << flat.shape() << ": " << layout.Describe());
  }
  std::map<std::string, NDArray> out;
  for (const RnnTensor& t : layout.Tensors()) out[prefix + t.name] = View(flat, t);
  return out;
}

NDArray BuildRnnParameters(const AttrMap& attrs, int64_t input_size,
                           const std::map<std::string, NDArray>& tensors,
                           const std::string& prefix) {
  const RnnParamLayout layout = LayoutOf(attrs, input_size, "BuildRnnParameters");
  const std::vector<RnnTensor> parts = layout.Tensors();
  const NDArray& first = Checked(tensors, prefix + parts[0].name, parts[0], nullptr);
  std::set<std::string> used;
  for (const RnnTensor& t : parts) used.insert(prefix + t.name);
  CheckNoneLeft(tensors, prefix, used);
  NDArray flat(Shape{layout.size()}, first.device(), first.dtype());
  for (const RnnTensor& t : parts)
    Checked(tensors, prefix + t.name, t, &first).CopyTo(View(flat, t));
  return flat;
}

}  // namespace weft
