#include "engine/internal/opr_block.h"

#include <algorithm>

#include "engine/internal/threaded_var.h"

namespace weft::engine {

namespace {

ThreadedVar* Checked(VarHandle v, const void* owner, const char* name) {
  CheckVar(v, owner, name);
  return static_cast<ThreadedVar*>(v);
}

}  // namespace

void OprVars::Assign(VarList reads, VarList writes, const void* owner, const char* name) {
  const size_t capacity = reads.size() + writes.size();
  if (capacity > kInline) heap_ = std::make_unique<ThreadedVar*[]>(capacity);
  ThreadedVar** out = mutable_data();
  size_t n = 0;
  for (VarHandle v : writes) out[n++] = Checked(v, owner, name);
  if (n > 1) {
    std::sort(out, out + n);
    n = std::unique(out, out + n) - out;
  }
  num_writes_ = n;
  for (VarHandle v : reads) {
    ThreadedVar* var = Checked(v, owner, name);
    if (!std::binary_search(out, out + num_writes_, var)) out[n++] = var;
  }
  if (n - num_writes_ > 1) {
    std::sort(out + num_writes_, out + n);
    n = std::unique(out + num_writes_, out + n) - out;
  }
  num_reads_ = n - num_writes_;
}

}  // namespace weft::engine
