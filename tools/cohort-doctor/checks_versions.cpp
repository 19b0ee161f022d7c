// Findings, versions and the CUDA driver check.

#include "checks.hpp"

#include <algorithm>
#include <array>
#include <cstdio>

namespace cohort::doctor {

std::string_view to_string(Severity severity) noexcept {
  switch (severity) {
    case Severity::ok:
      return "ok";
    case Severity::info:
      return "info";
    case Severity::warn:
      return "warn";
    case Severity::error:
      return "error";
  }
  return "unknown";
}

int exit_status(std::span<const Finding> findings) noexcept {
  const bool any_error = std::any_of(findings.begin(), findings.end(), [](const Finding& finding) {
    return finding.severity == Severity::error;
  });
  return any_error ? 1 : 0;
}

std::string Version::to_string(bool with_patch) const {
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "." + std::string&&.
  std::string text = std::to_string(major);
  text += '.';
  text += std::to_string(minor);
  if (with_patch) {
    text += '.';
    text += std::to_string(patch);
  }
  return text;
}

Version cuda_version_from_code(int code) noexcept {
  return Version{code / 1000, (code % 1000) / 10, 0};
}

Version nccl_version_from_code(int code) noexcept {
  if (code >= 10000) {
    return Version{code / 10000, (code % 10000) / 100, code % 100};
  }
  return Version{code / 1000, (code % 1000) / 100, code % 100};
}

Version cudnn_version_from_code(long long code) noexcept {
  const auto value = static_cast<int>(code);
  if (value >= 90000) {
    return Version{value / 10000, (value % 10000) / 100, value % 100};
  }
  return Version{value / 1000, (value % 1000) / 100, value % 100};
}

Finding check_cuda_driver(int driver_code, int runtime_code) {
  Finding finding{Severity::ok, "CUDA driver", "", ""};
  const Version runtime = cuda_version_from_code(runtime_code);
  const std::string runtime_text = "CUDA runtime " + runtime.to_string(false);
  if (driver_code <= 0) {
    finding.severity = Severity::info;
    finding.message =
        "no NVIDIA driver is installed (cudaDriverGetVersion gives 0): this machine "
        "cannot run the CUDA backend";
    finding.advice = "for GPU training install an NVIDIA driver that supports " + runtime_text +
                     " or newer; without one cohort runs on the host backend";
    return finding;
  }
  const Version driver = cuda_version_from_code(driver_code);
  const std::string driver_text = "the driver supports CUDA " + driver.to_string(false);
  if (driver.major < runtime.major) {
    finding.severity = Severity::error;
    finding.message =
        driver_text + ", older than this build's " + runtime_text + " needs: no GPU can be used";
    finding.advice = "upgrade the NVIDIA driver to one for CUDA " + runtime.to_string(false) +
                     " or newer, or (data-center GPUs) install the cuda-compat forward-"
                     "compatibility package, or rebuild cohort with a CUDA " +
                     std::to_string(driver.major) + ".x toolkit";
  } else if (driver < runtime) {
    finding.severity = Severity::warn;
    finding.message = driver_text + ", older than " + runtime_text +
                      ": it runs through minor-version compatibility, but PTX from the newer "
                      "toolkit cannot be JIT-compiled and newer APIs fail with "
                      "cudaErrorCallRequiresNewerDriver";
    finding.advice = "upgrade the NVIDIA driver to one for CUDA " + runtime.to_string(false) +
                     " or newer, and build for the GPU's exact architecture (no PTX JIT)";
  } else {
    finding.message = driver_text + ", enough for " + runtime_text;
  }
  return finding;
}

Finding check_library_version(std::string_view library, std::optional<Version> loaded,
                              std::optional<Version> compiled) {
  Finding finding{Severity::ok, std::string(library), "", ""};
  if (!loaded) {
    finding.severity = Severity::info;
    finding.message = "not part of this build";
    return finding;
  }
  finding.message = std::string(library) + " " + loaded->to_string() + " loaded";
  if (!compiled) {
    return finding;
  }
  const std::string against = ", compiled against " + compiled->to_string();
  if (loaded->major != compiled->major) {
    finding.severity = Severity::error;
    finding.message += against + ": another major version, whose ABI differs";
    finding.advice = "put " + std::string(library) + " " + std::to_string(compiled->major) +
                     ".x first on LD_LIBRARY_PATH, or rebuild cohort against the installed one";
  } else if (*loaded < *compiled) {
    finding.severity = Severity::warn;
    finding.message += against + ": older than the headers, so functions added since are missing";
    finding.advice = "put " + std::string(library) + " " + compiled->to_string() +
                     " or newer first on LD_LIBRARY_PATH";
  } else {
    finding.message += against;
  }
  return finding;
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr std::array<const char*, 6> kUnits = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t unit = 0;
  std::uint64_t scale = 1;
  while (unit + 1 < kUnits.size() && bytes >= scale * 1024) {
    scale *= 1024;
    ++unit;
  }
  if (bytes % scale == 0) {
    return std::to_string(bytes / scale) + " " + kUnits[unit];
  }
  std::array<char, 32> text{};
  std::snprintf(text.data(), text.size(), "%.1f %s",
                static_cast<double>(bytes) / static_cast<double>(scale), kUnits[unit]);
  return text.data();
}

}  // namespace cohort::doctor
