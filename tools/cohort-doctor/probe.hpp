#pragma once

/// @file
/// The probes: they ask the system and the CUDA libraries, and write facts into a Report.
/// None of them throws; what fails goes into `Report::probe_problems`.

#include "report.hpp"

namespace cohort::doctor {

/// cohort's version, the environment, host name, CPU cores, IPv4 interfaces, /dev/shm and the
/// locked-memory and stack limits (probe_host.cpp).
void probe_host(Report& report);

/// CUDA runtime and driver, NCCL, cuBLAS and cuDNN versions, the GPUs and the peer access
/// between them (probe_cuda.cpp); in a build without CUDA, only that and why there is no GPU
/// (probe_no_cuda.cpp).
void probe_cuda(Report& report);

}  // namespace cohort::doctor
