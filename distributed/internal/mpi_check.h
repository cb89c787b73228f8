// One-line checks of MPI calls: a call that does not return MPI_SUCCESS throws weft::Error with
// the call and MPI's own message. MPI_COMM_WORLD is set to return errors (MPI_ERRORS_RETURN).
#pragma once

#include <mpi.h>

#include <string>

namespace weft::dist::internal {

void MpiCheck(int rc, const char* call);
std::string MpiErrorString(int rc);

}  // namespace weft::dist::internal

#define WEFT_MPI_CHECK(call) ::weft::dist::internal::MpiCheck((call), #call)
