#pragma once

// What a CUDA completion query answered (not public API): the status of cudaEventQuery or
// cudaStreamQuery, sorted without CUDA's headers so that the host build tests the rule
// (tests/core/test_query_status.cpp); src/core/stream_cuda.cpp checks the numbers against CUDA's.

namespace cohort::detail {

enum class QueryAnswer {
  ready,      ///< the work is done
  not_ready,  ///< not yet, or not answerable now (a graph capture elsewhere); ask again later
  failed,     ///< the query failed: a sticky error, which no later query will clear
};

/// cudaError_t values, as the CUDA runtime defines them (stable since CUDA 10).
inline constexpr int kCudaSuccess = 0;
inline constexpr int kCudaErrorNotReady = 600;
/// cudaErrorStreamCaptureUnsupported ... cudaErrorStreamCaptureWrongThread: a call that a graph
/// capture forbids at that moment, or a capture invalidated by such a call.
inline constexpr int kCudaFirstCaptureError = 900;
inline constexpr int kCudaLastCaptureError = 908;

// Note [Queries during a capture]
// A graph capture in cudaStreamCaptureModeGlobal (most frameworks' default, and NVIDIA's
// samples') forbids "potentially unsafe" calls on every thread of the process while it records,
// cudaEventQuery among them: the call fails with cudaErrorStreamCaptureUnsupported and the
// capture is invalidated. cohort's queries are no part of any capture (collectives are never
// captured, Note [Graph capture]), so they run with the calling thread in relaxed capture mode
// (stream_cuda.cpp), where CUDA allows them, and the watchdog's thread is in relaxed mode for
// good (Note [Watchdog and graph capture]). Should a capture status still come back (a capture
// this query did not cause, a driver that refuses anyway), it says nothing about the work
// polled: it is "not ready", asked again a tick later, never a sticky fault that fails the
// collective, publishes a failure and aborts every rank.

/// How a completion query's `status` (a cudaError_t) is to be read.
constexpr QueryAnswer classify_query(int status) noexcept {
  if (status == kCudaSuccess) return QueryAnswer::ready;
  if (status == kCudaErrorNotReady) return QueryAnswer::not_ready;
  if (status >= kCudaFirstCaptureError && status <= kCudaLastCaptureError) {
    return QueryAnswer::not_ready;  // Note [Queries during a capture]
  }
  return QueryAnswer::failed;
}

}  // namespace cohort::detail
