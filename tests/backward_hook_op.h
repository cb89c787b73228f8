// A test-only op pair whose backward runs the test's code on its engine worker: `name` is an
// identity, and its gradient `_backward_<name>` (an identity too) first calls `hook`, which may
// wait for a gate the test opens, block, throw (the op's error) or end the process. Where it sits
// in a graph decides which gradients backward writes before the hook runs and which after.
//
//   RegisterBackwardHookOp("_test_gate", [] { g_gate.wait(); });
//   Symbol x = Symbol::Op("_test_gate", {Symbol::Op("FullyConnected", ...)});
#pragma once

#include <functional>
#include <string>

namespace weft {

// Registers the two ops (CPU); call once per name, before the graph that uses them is bound.
// Returns true, so that a test file can register at static initialization.
bool RegisterBackwardHookOp(const std::string& name, std::function<void()> hook);

}  // namespace weft
