#include "core/json.h"

#include <set>
#include <vector>

#include "core/text.h"

namespace weft {

namespace {

using Json = nlohmann::json;

// How much of the parser's own message is kept: its text, and the start of the token it quotes.
constexpr size_t kMaxParserMessageBytes = 160;

// A SAX pass that builds nothing: it stops at the first level past the limit or repeated key, and
// records the first error. nlohmann's parser is itself iterative, so this pass never recurses.
class Checker {
 public:
  explicit Checker(int max_depth) : max_depth_(max_depth) {}

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t) { return true; }
  bool number_unsigned(Json::number_unsigned_t) { return true; }
  bool number_float(Json::number_float_t, const Json::string_t&) { return true; }
  bool string(Json::string_t&) { return true; }
  bool binary(Json::binary_t&) { return true; }
  bool start_object(size_t) {
    keys_.emplace_back();
    return Open();
  }
  bool key(Json::string_t& key) {
    if (keys_.back().insert(key).second) return true;
    error_ = "duplicate key '" + Abbreviate(key) + "'";
    return false;
  }
  bool end_object() {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(size_t) { return Open(); }
  bool end_array() {
    --depth_;
    return true;
  }
  template <typename Exception>
  bool parse_error(size_t, const std::string&, const Exception& e) {
    error_ = "invalid JSON: " + Abbreviate(e.what(), kMaxParserMessageBytes);
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  bool Open() {
    if (++depth_ <= max_depth_) return true;
    error_ =
        "JSON nested deeper than " + std::to_string(max_depth_) + " levels of arrays and objects";
    return false;
  }

  const int max_depth_;
  int depth_ = 0;
  std::vector<std::set<std::string>> keys_;  // per open object, the keys it has so far
  std::string error_;
};

}  // namespace

ParsedJson ParseJson(std::string_view text, int max_depth) {
  Checker checker(max_depth);
  if (!Json::sax_parse(text, &checker)) {
    return {Json(), checker.error().empty() ? std::string("invalid JSON") : checker.error()};
  }
  // The text is valid and shallow: the DOM parse (no callback: the callback parser is quadratic in
  // an object's size) cannot fail or recurse deeply.
  return {Json::parse(text), ""};
}

std::string JsonForMessage(const Json& value) {
  return Abbreviate(value.dump(-1, ' ', false, Json::error_handler_t::replace));
}

}  // namespace weft
