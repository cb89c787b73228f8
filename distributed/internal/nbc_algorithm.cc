#include "distributed/internal/nbc_algorithm.h"

namespace weft::dist::internal {

namespace {
constexpr char kVariable[] = "coll_libnbc_iallreduce_algorithm";
}  // namespace

NbcAlgorithm NbcAlgorithm::Connect() {
  NbcAlgorithm result;
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return result;
  result.tools_open_ = true;
  int index = -1, count = 0;
  MPI_T_cvar_handle handle = MPI_T_CVAR_HANDLE_NULL;
  if (MPI_T_cvar_get_index(kVariable, &index) != MPI_SUCCESS) return result;
  if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) != MPI_SUCCESS) return result;
  int value = -1;
  if (count != 1 || MPI_T_cvar_read(handle, &value) != MPI_SUCCESS || value != kDefault) {
    MPI_T_cvar_handle_free(&handle);  // a user's setting, or not the int we know: leave it alone
    return result;
  }
  result.handle_ = handle;
  return result;
}

void NbcAlgorithm::Close() {
  if (Available()) MPI_T_cvar_handle_free(&handle_);
  handle_ = MPI_T_CVAR_HANDLE_NULL;
  if (tools_open_) MPI_T_finalize();
  tools_open_ = false;
}

void NbcAlgorithm::BeforeAllReduce(size_t bytes) {
  const int value = ForAllReduce(bytes);
  if (!Available() || value == written_) return;
  if (MPI_T_cvar_write(handle_, &value) == MPI_SUCCESS) written_ = value;
}

int NbcAlgorithm::Current() const {
  int value = -1;
  if (Available() && MPI_T_cvar_read(handle_, &value) != MPI_SUCCESS) value = -1;
  return value;
}

}  // namespace weft::dist::internal
