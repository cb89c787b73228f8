// Operator attributes: what a user writes as strings ({"num_hidden", "128"}), parsed once into the
// op's typed parameter struct, with errors that name the op, the attribute and the bad value.
//
//   struct FcParam { int num_hidden; bool no_bias; };
//   FcParam ParseFc(AttrReader& r) {
//     return {r.Int("num_hidden", std::nullopt, 1), r.Bool("no_bias", false)};
//   }   // an attribute the op did not read is an error too ("unknown attribute")
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/shape.h"

namespace weft {

using AttrMap = std::map<std::string, std::string>;

// Reads typed values out of an AttrMap for one op; remembers what was read.
class AttrReader {
 public:
  AttrReader(std::string op, const AttrMap& attrs) : op_(std::move(op)), attrs_(attrs) {}

  // Each returns the attribute's value, or `fallback` when it is absent; with no fallback the
  // attribute is required. Values outside [min, max] are errors.
  int Int(const std::string& name, std::optional<int> fallback, int min = -(1 << 30), int max = 1 << 30);
  double Float(const std::string& name, std::optional<double> fallback);
  bool Bool(const std::string& name, std::optional<bool> fallback);
  std::string String(const std::string& name, std::optional<std::string> fallback);
  // One of `choices`.
  std::string Enum(const std::string& name, const std::vector<std::string>& choices, std::optional<std::string> fallback);
  Shape ShapeAttr(const std::string& name, std::optional<Shape> fallback);
  // A tuple of integers that may be negative (axes, reshape targets): "(0, -1)".
  std::vector<int64_t> IntList(const std::string& name, std::optional<std::vector<int64_t>> fallback);

  // Throws if an attribute was given that the op never read.
  void CheckAllRead() const;
  const std::string& op() const { return op_; }

 private:
  const std::string* Find(const std::string& name, bool required);
  [[noreturn]] void Bad(const std::string& name, const std::string& value, const std::string& expected) const;

  const std::string op_;
  const AttrMap& attrs_;
  std::set<std::string> read_;
};

// An op instance's attributes: the strings the user gave and the parsed parameter struct.
// Immutable and cheap to copy (two shared pointers): a pushed call keeps a copy.
class Attrs {
 public:
  Attrs() : raw_(EmptyMap()) {}
  Attrs(AttrMap raw, std::shared_ptr<const void> parsed)
      : raw_(raw.empty() ? EmptyMap() : std::make_shared<const AttrMap>(std::move(raw))), parsed_(std::move(parsed)) {}
  const AttrMap& raw() const { return *raw_; }
  template <typename P>
  const P& Get() const {
    return *static_cast<const P*>(parsed_.get());
  }

 private:
  static const std::shared_ptr<const AttrMap>& EmptyMap() {
    static const auto* empty = new std::shared_ptr<const AttrMap>(std::make_shared<const AttrMap>());
    return *empty;
  }
  std::shared_ptr<const AttrMap> raw_;
  std::shared_ptr<const void> parsed_;
};

}  // namespace weft
