// WaitHelper: work a thread may do while it waits for an op, for a layer above the engine whose
// ops are completed by a thread of its own (dist's progress thread, which polls MPI and NCCL).
//
// A wait (WaitForVar) first watches its op for a few tens of microseconds before it sleeps. On a
// core shared with the thread that completes the op, each hand-over between the two is a context
// switch, several microseconds, twice per collective: more than a small all-reduce takes. While
// it watches, the waiting thread calls the helper, which may drive that work itself (start and
// test collectives, and complete their ops, on the waiting thread), so that nothing switches.
//
//   class Progress : public engine::WaitHelper { bool Help() override; ... };
//   engine::AddWaitHelper(&progress);     // once it can run on any thread; false: one is set
//   engine::RemoveWaitHelper(&progress);  // returns once no waiter is inside progress.Help()
//
// Help() is called again and again while a wait watches, on any thread that waits (never on an
// engine worker): it must return quickly, never block (try a lock, do not take it), and it may
// complete engine ops. It returns true when it found work (the waiter looks again at once, without
// yielding). The helper is a shortcut, never a requirement: the work's own thread must complete it
// whether or not anyone helps.
#pragma once

namespace weft::engine {

class WaitHelper {
 public:
  virtual ~WaitHelper() = default;
  virtual bool Help() = 0;
};

// One helper per process: false (and nothing changes) when another is set.
bool AddWaitHelper(WaitHelper* helper);
// Removes `helper` if it is the one set, and waits until no waiter is inside its Help().
void RemoveWaitHelper(WaitHelper* helper);

// For the engine's waits: runs the helper, if any, once. False when there is none or it found
// nothing to do.
bool HelpWhileWaiting();

}  // namespace weft::engine
