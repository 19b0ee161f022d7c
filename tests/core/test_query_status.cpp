// How a completion query's status is read (Note [Queries during a capture] in
// cohort/core/detail/query_status.hpp): a capture status is "not ready", never a sticky fault
// that would fail a collective and abort every rank. The CUDA build checks the numbers against
// CUDA's enum (src/core/stream_cuda.cpp); the GPU side is test_comm_gpu's
// AGlobalCaptureBesideACollectiveInFlight.

#include <cohort/core/detail/query_status.hpp>

#include <gtest/gtest.h>

namespace {

using cohort::detail::classify_query;
using cohort::detail::QueryAnswer;

TEST(QueryStatus, SuccessIsReadyAndNotReadyIsNotReady) {
  EXPECT_EQ(classify_query(0), QueryAnswer::ready);
  EXPECT_EQ(classify_query(600), QueryAnswer::not_ready);  // cudaErrorNotReady
}

TEST(QueryStatus, EveryGraphCaptureStatusIsNotReady) {
  // cudaErrorStreamCaptureUnsupported (900) ... cudaErrorStreamCaptureWrongThread (908), the
  // first of them what a query from another thread gets during a global-mode capture.
  for (int status = 900; status <= 908; ++status) {
    EXPECT_EQ(classify_query(status), QueryAnswer::not_ready) << status;
  }
}

TEST(QueryStatus, ASickDeviceFails) {
  // cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorAssert, cudaErrorInvalidValue,
  // cudaErrorInvalidResourceHandle, and cudaErrorTimeout (909), just past the capture range.
  for (const int status : {700, 719, 710, 1, 400, 909, 899, 601}) {
    EXPECT_EQ(classify_query(status), QueryAnswer::failed) << status;
  }
}

}  // namespace
