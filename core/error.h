// weft::Error and the CHECK macros: every user-facing failure in weft is a weft::Error whose
// message says what was expected, what was found, and where.
//
//   WEFT_CHECK(ndim > 0) << "FullyConnected: data must have at least one axis";
//   WEFT_CHECK_EQ(a.ndim(), b.ndim()) << "add: operands must have the same rank";
//   WEFT_THROW("unknown op '" << name << "'");
//
// A failed check throws weft::Error with a message of the form
//   "core/shape.cc:42: Check failed: a == b (6 vs. 5): add: operands must have the same rank"
#pragma once

#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

namespace weft {

class Error : public std::exception {
 public:
  explicit Error(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

namespace internal {

// Collects a streamed message and throws weft::Error from its destructor, at the end of the
// full expression that created it (the idiom of glog's and dmlc's fatal log messages).
class ErrorBuilder {
 public:
  ErrorBuilder(const char* file, int line, const std::string& what);
  ErrorBuilder(const ErrorBuilder&) = delete;
  ErrorBuilder& operator=(const ErrorBuilder&) = delete;
  ~ErrorBuilder() noexcept(false);  // throws weft::Error

  template <typename T>
  ErrorBuilder& operator<<(const T& value) {
    if (!has_context_) {
      stream_ << ": ";
      has_context_ = true;
    }
    stream_ << value;
    return *this;
  }

 private:
  std::ostringstream stream_;
  bool has_context_ = false;
};

template <typename T, typename = void>
struct IsStreamable : std::false_type {};
template <typename T>
struct IsStreamable<
    T, std::void_t<decltype(std::declval<std::ostream&>() << std::declval<const T&>())>>
    : std::true_type {};

template <typename T>
void PrintCheckValue(std::ostream& os, const T& value) {
  if constexpr (IsStreamable<T>::value) {
    os << value;
  } else if constexpr (std::is_enum_v<T>) {
    os << static_cast<long long>(value);
  } else {
    os << "<unprintable>";
  }
}

// Returns null when `ok`, else "Check failed: <expr> (<a> vs. <b>)".
template <typename A, typename B>
std::unique_ptr<std::string> CheckOpMessage(bool ok, const A& a, const B& b, const char* expr) {
  if (ok) return nullptr;
  std::ostringstream os;
  os << "Check failed: " << expr << " (";
  PrintCheckValue(os, a);
  os << " vs. ";
  PrintCheckValue(os, b);
  os << ")";
  return std::make_unique<std::string>(os.str());
}

std::string FormatError(const char* file, int line, const std::string& message);

}  // namespace internal
}  // namespace weft

// The switch keeps the macros safe inside an unbraced if/else.
#define WEFT_CHECK(cond) \
  switch (0)             \
  case 0:                \
  default:               \
    if (cond)            \
      ;                  \
    else                 \
      ::weft::internal::ErrorBuilder(__FILE__, __LINE__, "Check failed: " #cond)

#define WEFT_CHECK_OP_(op, a, b)                                                                   \
  switch (0)                                                                                       \
  case 0:                                                                                          \
  default:                                                                                         \
    if (auto weft_check_a_ = (a); false)                                                           \
      ;                                                                                            \
    else if (auto weft_check_b_ = (b); false)                                                      \
      ;                                                                                            \
    else if (auto weft_check_msg_ = ::weft::internal::CheckOpMessage(                              \
                 weft_check_a_ op weft_check_b_, weft_check_a_, weft_check_b_, #a " " #op " " #b); \
             !weft_check_msg_)                                                                     \
      ;                                                                                            \
    else                                                                                           \
      ::weft::internal::ErrorBuilder(__FILE__, __LINE__, *weft_check_msg_)

#define WEFT_CHECK_EQ(a, b) WEFT_CHECK_OP_(==, a, b)
#define WEFT_CHECK_NE(a, b) WEFT_CHECK_OP_(!=, a, b)
#define WEFT_CHECK_LT(a, b) WEFT_CHECK_OP_(<, a, b)
#define WEFT_CHECK_LE(a, b) WEFT_CHECK_OP_(<=, a, b)
#define WEFT_CHECK_GT(a, b) WEFT_CHECK_OP_(>, a, b)
#define WEFT_CHECK_GE(a, b) WEFT_CHECK_OP_(>=, a, b)

// Throws weft::Error with a streamed message: WEFT_THROW("expected " << a << ", found " << b).
#define WEFT_THROW(message_stream)                   \
  throw ::weft::Error(::weft::internal::FormatError( \
      __FILE__, __LINE__, (std::ostringstream() << message_stream).str()))
