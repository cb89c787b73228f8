#include "ops/attrs.h"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <memory>

#include "core/error.h"
#include "core/text.h"

namespace weft {

namespace {

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

}  // namespace

// Every attribute error is formed here or in CheckAllRead, which quote a few dozen bytes of what
// the user gave (a value may be megabytes long) and say how long it was.
void AttrReader::Bad(const std::string& name, const std::string& value,
                     const std::string& expected) const {
  WEFT_THROW("op '" << op_ << "': attribute '" << Abbreviate(name) << "': expected " << expected
                    << ", found '" << Abbreviate(value) << "'");
}

const std::string* AttrReader::Find(const std::string& name, bool required) {
  read_.insert(name);
  auto it = attrs_.find(name);
  if (it != attrs_.end()) return &it->second;
  if (required) WEFT_THROW("op '" << op_ << "': attribute '" << name << "' is required");
  return nullptr;
}

int AttrReader::Int(const std::string& name, std::optional<int> fallback, int min, int max) {
  return static_cast<int>(Int64(name, fallback, min, max));
}

int64_t AttrReader::Int64(const std::string& name, std::optional<int64_t> fallback, int64_t min,
                          int64_t max) {
  const std::string* v = Find(name, !fallback);
  if (v == nullptr) return *fallback;
  std::string t = Trim(*v);
  int64_t result = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), result);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size()) Bad(name, *v, "an integer");
  if (result < min || result > max) {
    Bad(name, *v, "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return result;
}

std::string FloatAttr(double value) {
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, end);
}

std::string FormatTuple(const std::vector<int64_t>& values) {
  std::string s = "(";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + (values.size() == 1 ? ",)" : ")");
}

double AttrReader::Float(const std::string& name, std::optional<double> fallback) {
  const std::string* v = Find(name, !fallback);
  if (v == nullptr) return *fallback;
  std::string t = Trim(*v);
  char* end = nullptr;
  double result = std::strtod(t.c_str(), &end);
  if (t.empty() || *end != '\0') Bad(name, *v, "a number");
  return result;
}

bool AttrReader::Bool(const std::string& name, std::optional<bool> fallback) {
  const std::string* v = Find(name, !fallback);
  if (v == nullptr) return *fallback;
  std::string t = Trim(*v);
  std::transform(t.begin(), t.end(), t.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (t == "1" || t == "true") return true;
  if (t == "0" || t == "false") return false;
  Bad(name, *v, "true/false or 1/0");
}

std::string AttrReader::String(const std::string& name, std::optional<std::string> fallback) {
  const std::string* v = Find(name, !fallback);
  return v == nullptr ? *fallback : *v;
}

std::string AttrReader::Trimmed(const std::string& s) { return Trim(s); }

namespace {

// "weft::ScalarParam" rather than the mangled "N4weft11ScalarParamE".
std::string TypeName(const std::type_info& type) {
  int status = 0;
  const std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(type.name());
}

}  // namespace

void Attrs::WrongType(const std::type_info& asked) const {
  const std::string op = op_ == nullptr ? std::string("(unknown)") : *op_;
  if (type_ == nullptr)
    WEFT_THROW("op '" << op << "' has no parameters; asked for " << TypeName(asked));
  WEFT_THROW("op '" << op << "': parameters are " << TypeName(*type_) << ", asked for "
                    << TypeName(asked));
}

Shape AttrReader::ShapeAttr(const std::string& name, std::optional<Shape> fallback) {
  const std::string* v = Find(name, !fallback);
  if (v == nullptr) return *fallback;
  try {
    return Shape::Parse(*v);
  } catch (const Error&) {
    Bad(name, *v, "a shape such as (2, 3) with non-negative extents");
  }
}

std::vector<int64_t> AttrReader::IntList(const std::string& name,
                                         std::optional<std::vector<int64_t>> fallback) {
  const std::string* v = Find(name, !fallback);
  if (v == nullptr) return *fallback;
  std::string t = Trim(*v);
  if (t.size() >= 2 && (t.front() == '(' || t.front() == '[')) t = t.substr(1, t.size() - 2);
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos < t.size()) {
    size_t comma = t.find(',', pos);
    std::string item =
        Trim(t.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (item.empty() && comma == std::string::npos && !out.empty()) break;  // "(5,)"
    int64_t x = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), x);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size()) {
      Bad(name, *v, "a tuple of integers such as (0, -1)");
    }
    out.push_back(x);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

void AttrReader::CheckAllRead() const {
  for (const auto& [name, value] : attrs_) {
    if (read_.count(name) == 0) {
      std::string known;
      for (const auto& r : read_) known += (known.empty() ? "" : ", ") + r;
      WEFT_THROW("op '" << op_ << "': unknown attribute '" << Abbreviate(name) << "' = '"
                        << Abbreviate(value)
                        << "'; expected one of: " << (known.empty() ? "(none)" : known)
                        << DidYouMean(name, {read_.begin(), read_.end()}));
    }
  }
}

}  // namespace weft
