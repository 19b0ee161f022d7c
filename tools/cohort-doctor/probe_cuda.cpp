// CUDA facts: runtime, driver, NCCL, cuBLAS and cuDNN versions; the GPUs; peer access.
// Compiled only when COHORT_WITH_CUDA is on.

#include "probe.hpp"

#include <cohort/core/device.hpp>

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <library_types.h>
#include <nccl.h>
#if COHORT_DOCTOR_HAVE_CUDNN
#include <cudnn.h>
#endif

#include <array>

#ifndef COHORT_DOCTOR_CUDA_ARCHITECTURES
#define COHORT_DOCTOR_CUDA_ARCHITECTURES ""
#endif

namespace cohort::doctor {

namespace {

/// Runs a CUDA call; on failure clears the error, notes it and returns false.
bool cuda_ok(Report& report, cudaError_t status, const std::string& what) {
  if (status == cudaSuccess) {
    return true;
  }
  (void)cudaGetLastError();
  report.probe_problems.push_back(what + " failed: " + cudaGetErrorName(status) + ": " +
                                  cudaGetErrorString(status));
  return false;
}

LibraryVersion nccl_version(Report& report) {
  LibraryVersion library{"NCCL", std::nullopt, nccl_version_from_code(NCCL_VERSION_CODE)};
  int code = 0;
  const ncclResult_t status = ncclGetVersion(&code);
  if (status == ncclSuccess) {
    library.loaded = nccl_version_from_code(code);
  } else {
    report.probe_problems.push_back(std::string("ncclGetVersion failed: ") +
                                    ncclGetErrorString(status));
  }
  return library;
}

LibraryVersion cublas_version(Report& report) {
  LibraryVersion library{"cuBLAS", std::nullopt,
                         Version{CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH}};
  // cublasGetProperty needs no handle, hence no GPU.
  Version loaded;
  if (cublasGetProperty(MAJOR_VERSION, &loaded.major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &loaded.minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &loaded.patch) == CUBLAS_STATUS_SUCCESS) {
    library.loaded = loaded;
  } else {
    report.probe_problems.emplace_back("cublasGetProperty failed");
  }
  return library;
}

LibraryVersion cudnn_version() {
#if COHORT_DOCTOR_HAVE_CUDNN
  return LibraryVersion{"cuDNN", cudnn_version_from_code(static_cast<long long>(cudnnGetVersion())),
                        Version{CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL}};
#else
  return LibraryVersion{"cuDNN", std::nullopt, std::nullopt};
#endif
}

ComputeMode compute_mode_from(int value) {
  switch (value) {
    case cudaComputeModeDefault:
      return ComputeMode::default_mode;
    case cudaComputeModeExclusive:
    case cudaComputeModeExclusiveProcess:
      return ComputeMode::exclusive_process;
    case cudaComputeModeProhibited:
      return ComputeMode::prohibited;
    default:
      return ComputeMode::unknown;
  }
}

void probe_gpu(Report& report, int index) {
  const std::string which = "GPU" + std::to_string(index);
  cudaDeviceProp properties{};
  if (!cuda_ok(report, cudaGetDeviceProperties(&properties, index),
               "cudaGetDeviceProperties(" + which + ")")) {
    return;
  }
  GpuInfo gpu;
  gpu.index = index;
  gpu.name = properties.name;
  gpu.total_memory_bytes = properties.totalGlobalMem;
  gpu.compute_major = properties.major;
  gpu.compute_minor = properties.minor;
  gpu.multiprocessors = properties.multiProcessorCount;
  gpu.concurrent_managed_access = properties.concurrentManagedAccess != 0;
  gpu.pageable_memory_access = properties.pageableMemoryAccess != 0;
  std::array<char, 64> bus_id{};
  if (cuda_ok(report, cudaDeviceGetPCIBusId(bus_id.data(), static_cast<int>(bus_id.size()), index),
              "cudaDeviceGetPCIBusId(" + which + ")")) {
    gpu.pci_bus_id = bus_id.data();
  }
  int mode = 0;
  if (cuda_ok(report, cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, index),
              "cudaDeviceGetAttribute(compute mode, " + which + ")")) {
    gpu.compute_mode = compute_mode_from(mode);
  } else {
    gpu.compute_mode = ComputeMode::unknown;
  }
  report.gpus.push_back(std::move(gpu));
}

void probe_peers(Report& report) {
  for (int from = 0; from < report.gpu_count; ++from) {
    for (int to = 0; to < report.gpu_count; ++to) {
      if (from == to) {
        continue;
      }
      const std::string pair = "GPU" + std::to_string(from) + "->GPU" + std::to_string(to);
      PeerLink link{from, to, false, 0, false};
      int value = 0;
      if (cuda_ok(report,
                  cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrAccessSupported, from, to),
                  "cudaDeviceGetP2PAttribute(access, " + pair + ")")) {
        link.access = value != 0;
      }
      if (cuda_ok(report,
                  cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrPerformanceRank, from, to),
                  "cudaDeviceGetP2PAttribute(performance rank, " + pair + ")")) {
        link.performance_rank = value;
      }
      if (cuda_ok(report,
                  cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrNativeAtomicSupported, from, to),
                  "cudaDeviceGetP2PAttribute(native atomics, " + pair + ")")) {
        link.native_atomics = value != 0;
      }
      // cudaDeviceCanAccessPeer is what enabling peer access checks; it agrees with the
      // attribute on every system we know, but a disagreement would be worth seeing.
      int can_access = 0;
      if (cuda_ok(report, cudaDeviceCanAccessPeer(&can_access, from, to),
                  "cudaDeviceCanAccessPeer(" + pair + ")") &&
          (can_access != 0) != link.access) {
        report.probe_problems.push_back("cudaDeviceCanAccessPeer(" + pair +
                                        ") disagrees with cudaDevP2PAttrAccessSupported");
        link.access = link.access && can_access != 0;
      }
      report.peer_links.push_back(link);
    }
  }
}

}  // namespace

void probe_cuda(Report& report) {
  report.built_with_cuda = true;
  report.cuda_architectures = COHORT_DOCTOR_CUDA_ARCHITECTURES;
  cuda_ok(report, cudaRuntimeGetVersion(&report.cuda_runtime_code), "cudaRuntimeGetVersion");
  cuda_ok(report, cudaDriverGetVersion(&report.cuda_driver_code), "cudaDriverGetVersion");
  // The runtime loaded next to the one compiled against, like the libraries: a CUDA runtime of
  // another major version (a Python wheel's libcudart first on LD_LIBRARY_PATH) is an error.
  report.libraries.push_back(
      LibraryVersion{"CUDA runtime",
                     report.cuda_runtime_code > 0
                         ? std::optional<Version>(cuda_version_from_code(report.cuda_runtime_code))
                         : std::nullopt,
                     cuda_version_from_code(CUDART_VERSION)});
  report.libraries.push_back(nccl_version(report));
  report.libraries.push_back(cublas_version(report));
  report.libraries.push_back(cudnn_version());

  report.gpu_count = cuda_device_count();
  report.gpu_unavailable_reason = cuda_unavailable_reason();
  for (int index = 0; index < report.gpu_count; ++index) {
    probe_gpu(report, index);
  }
  probe_peers(report);
  if (report.gpu_count > 0) {
    report.nvlink_note =
        "cannot be determined: this build has no NVML headers, so the doctor does not load "
        "libnvidia-ml; peer access and performance ranks come from cudaDeviceGetP2PAttribute. "
        "`nvidia-smi topo -m` and `nvidia-smi nvlink --status` show the NVLinks";
  }
}

}  // namespace cohort::doctor
