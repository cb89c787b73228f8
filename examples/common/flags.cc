#include "examples/common/flags.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace examples {

namespace {

const char* KindName(int kind) {
  return kind == 0 ? "a string" : kind == 1 ? "an integer" : kind == 2 ? "a number" : "0 or 1";
}

}  // namespace

Flags::Flags(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

void Flags::AddString(const std::string& name, const std::string& fallback,
                      const std::string& help) {
  flags_[name] = {Kind::kString, fallback, help};
  order_.push_back(name);
}
void Flags::AddInt(const std::string& name, int fallback, const std::string& help) {
  flags_[name] = {Kind::kInt, std::to_string(fallback), help};
  order_.push_back(name);
}
void Flags::AddFloat(const std::string& name, double fallback, const std::string& help) {
  std::ostringstream os;
  os << fallback;
  flags_[name] = {Kind::kFloat, os.str(), help};
  order_.push_back(name);
}

void Flags::AddBool(const std::string& name, bool fallback, const std::string& help) {
  flags_[name] = {Kind::kBool, fallback ? "1" : "0", help};
  order_.push_back(name);
}

void Flags::Set(const std::string& name, const std::string& value) {
  auto it = flags_.find(name);
  if (it == flags_.end())
    WEFT_THROW("unknown flag --" << name << "; " << program_ << " --help lists the flags");
  Flag& flag = it->second;
  char* end = nullptr;
  if (flag.kind == Kind::kInt) (void)std::strtol(value.c_str(), &end, 10);
  if (flag.kind == Kind::kFloat) (void)std::strtod(value.c_str(), &end);
  const bool bad_bool = flag.kind == Kind::kBool && value != "0" && value != "1";
  const bool bad_number =
      (flag.kind == Kind::kInt || flag.kind == Kind::kFloat) && (value.empty() || *end != '\0');
  if (bad_bool || bad_number) {
    WEFT_THROW("flag --" << name << ": expected " << KindName(static_cast<int>(flag.kind))
                         << ", found '" << value << "'");
  }
  flag.value = value;
}

bool Flags::Parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("%s", Usage().c_str());
      return false;
    }
    if (arg.rfind("--", 0) != 0)
      WEFT_THROW("unexpected argument '" << arg << "': expected --flag=value");
    size_t eq = arg.find('=');
    auto flag = flags_.find(arg.substr(2));
    if (eq != std::string::npos) {
      Set(arg.substr(2, eq - 2), arg.substr(eq + 1));
    } else if (flag != flags_.end() && flag->second.kind == Kind::kBool) {
      flag->second.value = "1";
    } else if (i + 1 < argc) {
      Set(arg.substr(2), argv[++i]);
    } else {
      WEFT_THROW("flag " << arg << ": expected a value");
    }
  }
  return true;
}

const Flags::Flag& Flags::Find(const std::string& name) const {
  auto it = flags_.find(name);
  WEFT_CHECK(it != flags_.end()) << "the program asked for an undeclared flag --" << name;
  return it->second;
}

std::string Flags::GetString(const std::string& name) const { return Find(name).value; }
int Flags::GetInt(const std::string& name) const { return std::atoi(Find(name).value.c_str()); }
double Flags::GetFloat(const std::string& name) const {
  return std::atof(Find(name).value.c_str());
}
bool Flags::GetBool(const std::string& name) const { return Find(name).value == "1"; }

std::string Flags::Usage() const {
  std::ostringstream os;
  os << "usage: " << program_ << " [flags]\n\n" << description_ << "\n\nflags:\n";
  for (const std::string& name : order_) {
    const Flag& f = flags_.at(name);
    os << "  --" << name << " (default: " << (f.value.empty() ? "\"\"" : f.value) << ")\n      "
       << f.help << "\n";
  }
  return os.str();
}

}  // namespace examples
