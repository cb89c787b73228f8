// Shape arithmetic on extents that stay symbolic at import (weft/onnx.h): a batch axis "N" or a
// sequence length that the file leaves open. Exporters compute reshape targets from them at run
// time (Shape, Gather, Mul, Concat, Reshape around every attention block); the import follows that
// arithmetic here instead, so the bound graph holds none of it:
//
//   x: (N, T, 64)     Shape(x)[0] * 4  ->  the extent 4*N     Reshape(y, [4*N, T, 16])
//                                      ->  reshape_dims(y, x; shape=(4*in1[0], in1[1], 16))
//
// An extent is a product of a number and powers of the graph's symbolic extents (a monomial:
// what reshapes, flattening and head splitting compute). The shape of a value computed at run time
// comes from weft's own shape inference (passes/infer.h), run with each symbolic extent set to
// a prime and read back as such a product; two sets of primes must agree, so an extent that is no
// product (T + 1, (H - 3) / 2 + 1) is never mistaken for one, and whatever needs it is an error.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "graph/symbol.h"
#include "storage/ndarray.h"
#include "weft/onnx/tensor.h"

namespace weft::onnx_import {

// A symbolic extent of the graph: axis `axis` of graph input `input`, named as the file names it.
struct DimVar {
  std::string name;  // "batch"; the input and axis where the file gives no name
  std::string input;
  int axis = 0;
};

// factor * product of var^power: an extent at import.
struct SymDim {
  int64_t factor = 1;
  std::map<int, int> powers;  // DimVar index -> power > 0

  static SymDim Of(int64_t n) { return {n, {}}; }
  static SymDim Var(int var) { return {1, {{var, 1}}}; }
  bool IsKnown() const { return powers.empty(); }
  bool operator==(const SymDim&) const = default;
  std::string ToString(const std::vector<DimVar>& vars) const;
};

// Products and exact quotients of extents, and sums of like ones; nullopt where the result is no
// such product (N + 1, N / 3 of an unknown N) or its factor overflows int64.
std::optional<SymDim> Multiply(const SymDim& a, const SymDim& b);
std::optional<SymDim> Divide(const SymDim& a, const SymDim& b);
std::optional<SymDim> AddLike(const SymDim& a, const SymDim& b, int64_t sign);
// a mod b where a is an exact multiple of b (0; PyTorch 2's exporter checks that heads divide the
// width so); nullopt otherwise.
std::optional<SymDim> Remainder(const SymDim& a, const SymDim& b);

// A rank-0 or rank-1 integer value of shape arithmetic, some of whose entries are symbolic.
struct DimTensor {
  std::vector<int64_t> dims;  // {} or {n}
  std::vector<SymDim> values;
  std::optional<Symbol> shape_of;  // when the values are exactly Shape(x): x

  bool IsKnown() const;
  HostTensor ToHost() const;                 // every entry known
  static DimTensor Of(const HostTensor& t);  // an integer tensor of rank 0 or 1
};

// What the import knows of the graph's inputs: their extents, some symbolic, and dtypes.
struct SymbolicInputs {
  std::vector<DimVar> vars;
  std::map<std::string, std::vector<SymDim>> dims;
  std::map<std::string, DType> dtypes;
};

// The extents and dtype of `x` (output 0 of a symbol built so far, reading `params` and the
// graph's inputs): weft's shape inference with the symbolic extents set to primes, read back as
// products. An extent that is no product is nullopt.
struct SymbolicType {
  std::vector<std::optional<SymDim>> dims;
  DType dtype = DType::kFloat32;
};
SymbolicType InferSymbolic(const Symbol& x, const SymbolicInputs& inputs,
                           const std::map<std::string, NDArray>& params);
// The dtype alone (one inference, where the extents need two).
DType InferDType(const Symbol& x, const SymbolicInputs& inputs,
                 const std::map<std::string, NDArray>& params);

}  // namespace weft::onnx_import
