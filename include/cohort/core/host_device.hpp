#pragma once

/// @file
/// `COHORT_HOST_DEVICE` marks a function for host and device when nvcc compiles it, and is empty
/// for a host compiler, so that functors and 16-bit float types are written once for both.

#if defined(__CUDACC__)
#define COHORT_HOST_DEVICE __host__ __device__
#else
#define COHORT_HOST_DEVICE
#endif
