#include "weft/onnx/dims.h"

#include <array>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "passes/infer.h"

namespace weft::onnx_import {
namespace {

// Two sets of primes the symbolic extents take while shapes are inferred: one per variable.
constexpr int kMaxVars = 8;
constexpr std::array<std::array<int64_t, kMaxVars>, 2> kProbes = {{
    {1009, 1013, 1019, 1021, 1031, 1033, 1039, 1049},
    {1051, 1061, 1063, 1069, 1087, 1091, 1093, 1097},
}};

// `v` read back as factor * product of primes^power.
SymDim Decode(int64_t v, const std::array<int64_t, kMaxVars>& primes, int num_vars) {
  SymDim d;
  for (int k = 0; k < num_vars && v != 0; ++k) {
    while (v % primes[k] == 0) {
      v /= primes[k];
      ++d.powers[k];
    }
  }
  d.factor = v;
  return d;
}

// The shape and dtype of x with the variables set to `primes`.
std::pair<Shape, DType> Probed(const Symbol& x, const SymbolicInputs& inputs,
                               const std::map<std::string, NDArray>& params,
                               const std::array<int64_t, kMaxVars>& primes) {
  if (inputs.vars.size() > kMaxVars) {
    WEFT_THROW("ONNX import: expected at most " << kMaxVars
                                                << " symbolic extents among the graph's inputs, "
                                                   "found "
                                                << inputs.vars.size());
  }
  std::map<std::string, Shape> shapes;
  std::map<std::string, DType> dtypes;
  for (const std::string& name : x.ListArguments()) {
    if (const auto p = params.find(name); p != params.end()) {
      shapes[name] = p->second.shape();
      dtypes[name] = p->second.dtype();
      continue;
    }
    const auto d = inputs.dims.find(name);
    if (d == inputs.dims.end()) continue;
    Shape s;
    for (const SymDim& e : d->second) {
      int64_t v = e.factor;
      for (const auto& [var, power] : e.powers)
        for (int i = 0; i < power; ++i) v *= primes[var];
      s.PushBack(v);
    }
    shapes[name] = s;
    dtypes[name] = inputs.dtypes.at(name);
  }
  const Graph g = InferShapesAndTypes(x.ToGraph(), shapes, dtypes);
  const uint32_t e = g.EntryId(g.outputs()[0]);
  return {g.shapes()[e], g.dtypes()[e]};
}

}  // namespace

std::string SymDim::ToString(const std::vector<DimVar>& vars) const {
  std::ostringstream s;
  s << factor;
  for (const auto& [var, power] : powers)
    for (int i = 0; i < power; ++i) s << "*" << vars[var].name;
  std::string t = s.str();
  return t.rfind("1*", 0) == 0 ? t.substr(2) : t;
}

std::optional<SymDim> Multiply(const SymDim& a, const SymDim& b) {
  SymDim out = a;
  if (__builtin_mul_overflow(a.factor, b.factor, &out.factor)) return std::nullopt;
  for (const auto& [var, power] : b.powers) out.powers[var] += power;
  if (out.factor == 0) out.powers.clear();
  return out;
}

std::optional<SymDim> Divide(const SymDim& a, const SymDim& b) {
  if (b.factor == 0 || (b.factor == -1 && a.factor == std::numeric_limits<int64_t>::min()) ||
      a.factor % b.factor != 0)
    return std::nullopt;
  SymDim out = a;
  out.factor /= b.factor;
  for (const auto& [var, power] : b.powers) {
    const auto it = out.powers.find(var);
    if (it == out.powers.end() || it->second < power) return std::nullopt;
    if ((it->second -= power) == 0) out.powers.erase(it);
  }
  return out;
}

std::optional<SymDim> AddLike(const SymDim& a, const SymDim& b, int64_t sign) {
  if (a.powers != b.powers && a.factor != 0 && b.factor != 0) return std::nullopt;
  SymDim out = a.factor == 0 ? b : a;
  if (__builtin_mul_overflow(sign, b.factor, &out.factor) ||
      __builtin_add_overflow(a.factor, out.factor, &out.factor))
    return std::nullopt;
  if (out.factor == 0) out.powers.clear();
  return out;
}

std::optional<SymDim> Remainder(const SymDim& a, const SymDim& b) {
  if (!Divide(a, b)) return std::nullopt;
  return SymDim::Of(0);
}

bool DimTensor::IsKnown() const {
  for (const SymDim& d : values)
    if (!d.IsKnown()) return false;
  return true;
}

HostTensor DimTensor::ToHost() const {
  std::vector<int64_t> v;
  for (const SymDim& d : values) {
    if (!d.IsKnown()) WEFT_THROW("ONNX import: expected known extents, found a symbolic one");
    v.push_back(d.factor);
  }
  return HostTensor::OfInt64s(v, dims);
}

DimTensor DimTensor::Of(const HostTensor& t) {
  DimTensor out{t.dims, {}, std::nullopt};
  for (int64_t v : t.Int64s()) out.values.push_back(SymDim::Of(v));
  return out;
}

DType InferDType(const Symbol& x, const SymbolicInputs& inputs,
                 const std::map<std::string, NDArray>& params) {
  return Probed(x, inputs, params, kProbes[0]).second;
}

SymbolicType InferSymbolic(const Symbol& x, const SymbolicInputs& inputs,
                           const std::map<std::string, NDArray>& params) {
  const int num_vars = static_cast<int>(inputs.vars.size());
  const auto [a, dtype] = Probed(x, inputs, params, kProbes[0]);
  const Shape b = num_vars == 0 ? a : Probed(x, inputs, params, kProbes[1]).first;
  SymbolicType out{{}, dtype};
  for (int i = 0; i < a.ndim(); ++i) {
    const SymDim da = Decode(a[i], kProbes[0], num_vars), db = Decode(b[i], kProbes[1], num_vars);
    out.dims.push_back(da == db ? std::optional<SymDim>(da) : std::nullopt);
  }
  return out;
}

}  // namespace weft::onnx_import
