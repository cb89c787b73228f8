// Helpers for the public-API tests (weft_*_test): scratch files in the test's temporary folder,
// checks that a call throws weft::Error with every expected part in its message, and an
// environment variable set for one scope.
//
//   std::string path = WriteTempFile("bad.csv", "1,x\n");
//   ExpectErrorContains([&] { ReadCsv(path); }, {path, "column 2"});
//   { ScopedEnv off("WEFT_USE_FUSION", "0"); Executor::Bind(...); }   // restored after
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace weft::testing {

// `name` inside $TEST_TMPDIR (/tmp outside Bazel).
std::string TempPath(const std::string& name);
// Writes `bytes` to TempPath(name) and returns that path.
std::string WriteTempFile(const std::string& name, const std::string& bytes);
// Runs `fn` and returns the message of the weft::Error it throws, or "<no error>".
std::string ErrorMessage(const std::function<void()>& fn);
// Runs `fn`; adds a test failure unless it throws weft::Error whose message contains every part.
void ExpectErrorContains(const std::function<void()>& fn, const std::vector<std::string>& parts);

// Sets an environment variable for one scope; restores its old value (or its absence) after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

}  // namespace weft::testing
