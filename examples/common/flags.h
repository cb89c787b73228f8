// Command-line flags for the examples: --name=value or --name value, --help.
//
//   examples::Flags flags("train_mlp", "Trains an MLP on the digits data.");
//   flags.AddInt("epochs", 10, "passes over the training data");
//   if (!flags.Parse(argc, argv)) return 0;   // --help printed the usage
//   int epochs = flags.GetInt("epochs");
//
// An unknown flag or a malformed value is a weft::Error that names the flag and what it expected.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace examples {

class Flags {
 public:
  Flags(std::string program, std::string description);
  void AddString(const std::string& name, const std::string& fallback, const std::string& help);
  void AddInt(const std::string& name, int fallback, const std::string& help);
  void AddFloat(const std::string& name, double fallback, const std::string& help);
  // A switch: "--name" alone sets it, "--name=0" clears it.
  void AddBool(const std::string& name, bool fallback, const std::string& help);
  // Returns false after printing the usage for --help.
  bool Parse(int argc, char** argv);

  std::string GetString(const std::string& name) const;
  int GetInt(const std::string& name) const;
  double GetFloat(const std::string& name) const;
  bool GetBool(const std::string& name) const;
  std::string Usage() const;

 private:
  enum class Kind { kString, kInt, kFloat, kBool };
  struct Flag {
    Kind kind;
    std::string value;
    std::string help;
  };
  void Set(const std::string& name, const std::string& value);
  const Flag& Find(const std::string& name) const;

  std::string program_, description_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;
};

}  // namespace examples
