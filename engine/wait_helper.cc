#include "engine/wait_helper.h"

#include <atomic>
#include <thread>

namespace weft::engine {

namespace {
// A waiter counts itself in before it reads the helper, and out after its call; RemoveWaitHelper
// clears the helper before it reads the count. Sequentially consistent, so a waiter that read the
// old helper is counted when RemoveWaitHelper looks, and RemoveWaitHelper waits for it.
std::atomic<WaitHelper*> g_helper{nullptr};
std::atomic<int> g_inside{0};
}  // namespace

bool AddWaitHelper(WaitHelper* helper) {
  WaitHelper* none = nullptr;
  return g_helper.compare_exchange_strong(none, helper, std::memory_order_seq_cst);
}

void RemoveWaitHelper(WaitHelper* helper) {
  if (!g_helper.compare_exchange_strong(helper, nullptr, std::memory_order_seq_cst)) return;
  while (g_inside.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

bool HelpWhileWaiting() {
  if (g_helper.load(std::memory_order_relaxed) == nullptr)
    return false;  // the common case: no helper
  g_inside.fetch_add(1, std::memory_order_seq_cst);
  WaitHelper* helper = g_helper.load(std::memory_order_seq_cst);
  const bool found = helper != nullptr && helper->Help();
  g_inside.fetch_sub(1, std::memory_order_seq_cst);
  return found;
}

}  // namespace weft::engine
