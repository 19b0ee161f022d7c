#pragma once

/// @file
/// The probes: they ask the system and the CUDA libraries, and write facts into a Report.
/// None of them throws; what fails goes into `Report::probe_problems`.

#include "report.hpp"

#include <string>

namespace cohort::doctor {

/// Where the probes look: the real system by default; tests point them at a made-up one.
struct ProbeOptions {
  std::string sysfs_root;          ///< read <root>/sys instead of /sys ("": /)
  std::string nvml_library;        ///< NVML to dlopen ("": libnvidia-ml.so.1)
  double connect_timeout_s = 2.0;  ///< for the TCP connection to the rendezvous address
};

/// cohort's version, the environment, host name, CPU cores, IPv4 interfaces, /dev/shm, the
/// locked-memory and stack limits, the host inventory and the rendezvous address (resolved and
/// connected to) (probe_host.cpp).
void probe_host(Report& report, const ProbeOptions& options = {});

/// CUDA runtime and driver, NCCL, cuBLAS and cuDNN versions, the GPUs and the peer access
/// between them (probe_cuda.cpp); in a build without CUDA, only that and why there is no GPU
/// (probe_no_cuda.cpp).
void probe_cuda(Report& report);

/// NVML (the GPUs' links, ECC, remapped rows, clocks, modes) and sysfs (PCI paths, RDMA ports,
/// the peer-memory module) (probe_system.cpp).
void probe_gpu_system(Report& report, const ProbeOptions& options = {});

}  // namespace cohort::doctor
