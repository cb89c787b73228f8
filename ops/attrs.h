// Operator attributes: what a user writes as strings ({"num_hidden", "128"}), parsed once into the
// op's typed parameter struct, with errors that name the op, the attribute and the bad value.
//
//   struct FcParam { int num_hidden; bool no_bias; };
//   FcParam ParseFc(AttrReader& r) {
//     return {r.Int("num_hidden", std::nullopt, 1), r.Bool("no_bias", false)};
//   }   // an attribute the op did not read is an error too ("unknown attribute")
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/no_destructor.h"
#include "core/shape.h"

namespace weft {

using AttrMap = std::map<std::string, std::string>;

// The shortest text that AttrReader::Float reads back as exactly `value` (callers that build
// attributes from numbers: an op then runs with exactly those numbers).
std::string FloatAttr(double value);

// A tuple attribute as users write it, which AttrReader::IntList reads back: "(4, -1)", "(5,)"
// (callers that build attributes, and error messages).
std::string FormatTuple(const std::vector<int64_t>& values);

// Reads typed values out of an AttrMap for one op; remembers what was read.
class AttrReader {
 public:
  AttrReader(std::string op, const AttrMap& attrs) : op_(std::move(op)), attrs_(attrs) {}

  // Each returns the attribute's value, or `fallback` when it is absent; with no fallback the
  // attribute is required. Values outside [min, max] are errors.
  int Int(const std::string& name, std::optional<int> fallback, int min = -(1 << 30),
          int max = 1 << 30);
  // As Int, for values past int's range (element offsets).
  int64_t Int64(const std::string& name, std::optional<int64_t> fallback, int64_t min, int64_t max);
  double Float(const std::string& name, std::optional<double> fallback);
  bool Bool(const std::string& name, std::optional<bool> fallback);
  std::string String(const std::string& name, std::optional<std::string> fallback);
  // One of a small closed set, parsed into its enum value once:
  //   r.Choice<ActType>("act_type", {{"relu", ActType::kRelu}, {"tanh", ActType::kTanh}},
  //   std::nullopt)
  // Anything else is an error listing the choices.
  template <typename E>
  E Choice(const std::string& name, std::initializer_list<std::pair<std::string_view, E>> choices,
           std::optional<E> fallback) {
    const std::string* v = Find(name, !fallback);
    if (v == nullptr) return *fallback;
    const std::string t = Trimmed(*v);
    for (const auto& [text, value] : choices) {
      if (t == text) return value;
    }
    std::string expected = "one of";
    for (const auto& [text, value] : choices) expected += " '" + std::string(text) + "'";
    Bad(name, *v, expected);
  }
  Shape ShapeAttr(const std::string& name, std::optional<Shape> fallback);
  // A tuple of integers that may be negative (axes, reshape targets): "(0, -1)".
  std::vector<int64_t> IntList(const std::string& name,
                               std::optional<std::vector<int64_t>> fallback);

  // Throws if an attribute was given that the op never read.
  void CheckAllRead() const;
  const std::string& op() const { return op_; }

 private:
  const std::string* Find(const std::string& name, bool required);
  static std::string Trimmed(const std::string& s);
  [[noreturn]] void Bad(const std::string& name, const std::string& value,
                        const std::string& expected) const;

  const std::string op_;
  const AttrMap& attrs_;
  std::set<std::string> read_;
};

// The parsed parameter struct of one op instance, with the type it was parsed as, so that
// reading it as another type is an error instead of undefined behaviour.
struct ParsedParams {
  std::shared_ptr<const void> value;
  const std::type_info* type = nullptr;  // of *value; null when the op takes no attributes

  template <typename P>
  static ParsedParams Of(P params) {
    return {std::make_shared<const P>(std::move(params)), &typeid(P)};
  }
};

// An op instance's attributes: the strings the user gave and the parsed parameter struct.
// Immutable and cheap to copy (two shared pointers): a pushed call keeps a copy.
class Attrs {
 public:
  Attrs() : raw_(EmptyMap()) {}
  // `op` names the op in errors; it must outlive the Attrs (registered ops live forever).
  Attrs(AttrMap raw, ParsedParams parsed, const std::string* op)
      : raw_(raw.empty() ? EmptyMap() : std::make_shared<const AttrMap>(std::move(raw))),
        parsed_(std::move(parsed.value)),
        type_(parsed.type),
        op_(op) {}
  const AttrMap& raw() const { return *raw_; }
  // The parameters as the op's parser made them. Throws weft::Error naming the op when they were
  // parsed as another type (or the op takes none): one pointer comparison on the usual path.
  // The parse these attributes share with their copies (null when the op takes none): equal
  // identities mean equal attributes for as long as one of the copies is held.
  const void* identity() const { return parsed_.get(); }
  template <typename P>
  const P& Get() const {
    if (type_ == nullptr || *type_ != typeid(P)) WrongType(typeid(P));
    return *static_cast<const P*>(parsed_.get());
  }

 private:
  [[noreturn]] void WrongType(const std::type_info& asked) const;

  static const std::shared_ptr<const AttrMap>& EmptyMap() {
    static const NoDestructor<std::shared_ptr<const AttrMap>> empty(
        std::make_shared<const AttrMap>());
    return *empty;
  }
  std::shared_ptr<const AttrMap> raw_;
  std::shared_ptr<const void> parsed_;
  const std::type_info* type_ = nullptr;
  const std::string* op_ = nullptr;
};

}  // namespace weft
