#pragma once

/// @file
/// Checks for NCCL calls. Only for code built with the CUDA backend.

#include <cohort/core/error.hpp>

#include <nccl.h>

#include <string>

namespace cohort::detail {

/// "ncclAllReduce(...) failed: ncclUnhandledCudaError: unhandled cuda error (...); last NCCL
/// error: ...; NCCL 2.28.9".
inline std::string describe_nccl_error(const char* call, ncclResult_t status, ncclComm_t comm) {
  std::string text = call;
  text.append(" failed: ");
  text.append(ncclGetErrorString(status));
  if (const char* last = ncclGetLastError(comm); last != nullptr && *last != '\0') {
    text.append("; NCCL says: ");
    text.append(last);
  }
  int version = 0;
  if (ncclGetVersion(&version) == ncclSuccess) {
    text.append("; NCCL " + std::to_string(version / 10000) + "." +
                std::to_string((version / 100) % 100) + "." + std::to_string(version % 100));
  }
  text.append(". Run with NCCL_DEBUG=WARN for NCCL's own account.");
  return text;
}

}  // namespace cohort::detail

/// Calls an NCCL function that needs no communicator in its error text; throws NcclError.
#define COHORT_NCCL_TRY(call)                                                                  \
  do {                                                                                         \
    const ncclResult_t cohort_nccl_status_ = (call);                                           \
    if (cohort_nccl_status_ != ncclSuccess && cohort_nccl_status_ != ncclInProgress)           \
        [[unlikely]] {                                                                         \
      COHORT_FAIL(::cohort::NcclError,                                                         \
                  ::cohort::detail::describe_nccl_error(#call, cohort_nccl_status_, nullptr)); \
    }                                                                                          \
  } while (0)
