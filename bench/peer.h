// What the benchmarks share: integer flags, a median time, and running a peer (a Python script
// timing PyTorch) in the same run and reading the JSON object it prints last.
//
//   nlohmann::json torch = bench::RunPeer("bench/torch_peer.py", "2 10");
//   if (torch.value("available", false)) ... torch["results"] ...;   // else torch["error"] says
//   why
//
// The script is found from the binary, so a benchmark runs from any folder: through `bazel run`,
// straight from bazel-bin, or from the GPU bundle (tools/gpu_bundle.sh), which keeps the same
// runfiles layout. The interpreter is $WEFT_PEER_PYTHON, else the first python3 on $PATH that
// imports torch (a GPU machine's /usr/bin/python3 often has no PyTorch; a virtualenv's may).
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace bench {

// Milliseconds of one call of `step`: the median of `reps` calls, after one call to warm up.
double MedianMs(int reps, const std::function<void()>& step);

// --name=value, or `fallback`.
int IntFlag(int argc, char** argv, const char* name, int fallback);
std::string StringFlag(int argc, char** argv, const char* name, const std::string& fallback);

// $WEFT_PEER_PYTHON when set (not checked), else the first `python3` on $PATH (empty entries
// skipped) for which `python3 -c "import torch"` succeeds. Empty when there is none; `*why` then
// says which interpreters were tried.
std::string FindPeerPython(std::string* why);

// The file at `path` (relative to the workspace, e.g. "bench/torch_peer.py") in the runfiles of
// this binary (<binary>.runfiles, else $RUNFILES_DIR), else relative to the current folder, else
// to $BUILD_WORKSPACE_DIRECTORY. Empty when none exists; `*why` then lists where it looked.
std::string FindPeerScript(const std::string& path, std::string* why);

// Runs `command` through the shell: its exit status (-1 when it could not start), and what it
// printed on stdout in `*output`.
int RunCommand(const std::string& command, std::string* output);

// Runs the script at `path` (found by FindPeerScript) with FindPeerPython's interpreter and
// `args`; returns the JSON object it printed on its last line, with "python" set to the
// interpreter, or {"available": false, "error": ...} saying why it did not run.
nlohmann::json RunPeer(const std::string& path, const std::string& args);

// A peer that answers in turn: started once with `args`, it reads one request per line on its
// stdin and answers each with one JSON object on a line of its own (lines not starting with '{'
// are noise), so that a benchmark can alternate its rounds with the peer's. These machines change
// speed by up to 2x for seconds at a time, for both sides alike: rounds taken far apart in time
// compare the machine's moods, not the engines.
//
//   bench::PeerSession peer("bench/torch_peer.py", "2 --serve");
//   if (peer.available()) nlohmann::json round = peer.Ask("inplace");   // {"available": false,
//   ...} on failure
class PeerSession {
 public:
  PeerSession(const std::string& path, const std::string& args);
  ~PeerSession();  // closes the peer's stdin and waits for it
  PeerSession(const PeerSession&) = delete;
  PeerSession& operator=(const PeerSession&) = delete;

  bool available() const { return to_ != nullptr; }
  const std::string& error() const { return error_; }
  const nlohmann::json& hello() const {
    return hello_;
  }  // the first answer, printed when it started
  nlohmann::json Ask(const std::string& request);

 private:
  nlohmann::json ReadAnswer();

  pid_t pid_ = -1;
  FILE* to_ = nullptr;    // the peer's stdin
  FILE* from_ = nullptr;  // its stdout and stderr
  std::string error_;
  nlohmann::json hello_;
};

// bazel run starts in the runfiles tree: move to the workspace where it was started.
void ChdirToWorkspace();

}  // namespace bench
