// --profile=file.json for the examples: a scope that profiles what runs inside it (weft/profiler.h)
// and writes the trace (Chrome trace JSON: open it in Perfetto, https://ui.perfetto.dev, or
// chrome://tracing) when it ends. Under `bazel run`, a relative path is taken from the workspace.
//
//   flags.AddString("profile", "", examples::kProfileHelp);
//   examples::ProfileScope profile(flags.GetString("profile"));   // nothing for ""
//   ... the steps to profile ...
//   profile.Stop();   // writes the trace and prints where; the destructor does it too
#pragma once

#include <string>

namespace examples {

inline constexpr char kProfileHelp[] =
    "write a Chrome trace of the run (ops per worker, GPU kernels and copies per stream, memory) "
    "to this file; "
    "open it in Perfetto or chrome://tracing";

class ProfileScope {
 public:
  explicit ProfileScope(const std::string& path);  // starts the profiler unless `path` is empty
  ~ProfileScope();                                 // Stop(), reporting a failure on stderr
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

  // Waits for the work pushed so far, writes the trace and prints its path. Throws weft::Error
  // when it cannot be written. Idempotent.
  void Stop();

 private:
  std::string path_;  // empty: not profiling (any more)
};

}  // namespace examples
