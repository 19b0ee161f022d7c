#include <layers/host_blas.hpp>

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <sstream>

// OpenBLAS's kernel choice, exported by its DYNAMIC_ARCH builds (Note [OpenBLAS kernels]).
extern "C" {
[[gnu::weak]] void gotoblas_dynamic_init();
[[gnu::weak]] void gotoblas_dynamic_quit();
}

namespace layers {
namespace {

// Note [OpenBLAS kernels]
// OpenBLAS built with DYNAMIC_ARCH (as Debian's is) picks its GEMM kernels by the CPU's model
// number once, when the library loads, and a model it does not know falls back to the oldest
// x86-64 kernels: Debian 12's 0.3.21 takes a Xeon of family 6, model 0xCF (Emerald Rapids, with
// AVX-512) for a Prescott, whose SSE3 GEMM ran at 6-10 GFLOPS on [64, 2048] x [2048, 2048] on one
// core where its SkylakeX kernels and PyTorch's MKL ran at 25-90 (the machine loaded; 2026-12-03).
// That alone made train_mlp at 17M parameters slower than PyTorch DDP.
//
// OpenBLAS's documented OPENBLAS_CORETYPE names the kernels instead, but the library reads it while
// it loads, before any code of this program runs (a pre-initialiser of the executable is too
// early: the C library has not yet set up the environment it would write to). So when the
// variable is unset and OpenBLAS runs kernels without AVX2 on a CPU whose features (as the OS
// enables them: __builtin_cpu_supports checks XCR0) have AVX2 and FMA, a static initialiser of
// this file sets the variable and has OpenBLAS choose again through the entry points its own load
// runs (gotoblas_dynamic_quit and gotoblas_dynamic_init, exported by DYNAMIC_ARCH builds; weak
// here, so that other builds link and are left alone). It runs once, before main, on one thread,
// with no GEMM in flight; the kernels' blocking sizes come with the new choice, and OpenBLAS's
// work buffers are sized for every kernel family alike. A choice by the user, or an OpenBLAS that
// knows the CPU, is kept. describe_host_blas() reports what runs, so benchmark reports say it.

bool set_by_user = false;

std::string kernels_for_features() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return {};
}

}  // namespace

bool host_blas_kernels_lack_avx2(std::string_view kernels) {
  static constexpr std::array kOlder = {
      "katmai", "coppermine",  "northwood", "prescott",  "banias",     "atom",         "core2",
      "penryn", "dunnington",  "nehalem",   "athlon",    "opteron",    "opteron_sse3", "barcelona",
      "nano",   "sandybridge", "bobcat",    "bulldozer", "piledriver", "unknown"};
  std::string lower(kernels);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::find(kOlder.begin(), kOlder.end(), lower) != kOlder.end();
}

namespace {

std::string running_kernels() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "";
}

const bool kernels_chosen = [] {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) {
    set_by_user = true;
    return false;
  }
  const std::string wanted = kernels_for_features();
  if (wanted.empty() || !host_blas_kernels_lack_avx2(running_kernels()) ||
      gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) {
    return false;
  }
  setenv("OPENBLAS_CORETYPE", wanted.c_str(), 0);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  return true;
}();

}  // namespace

std::string host_blas_kernels_for_this_cpu() {
  return kernels_for_features();
}

std::string host_blas_kernels() {
  return running_kernels();
}

bool host_blas_kernels_set_by_user() noexcept {
  return set_by_user;
}

bool host_blas_kernels_chosen_from_features() noexcept {
  return kernels_chosen;
}

std::string describe_host_blas() {
  // openblas_get_config(): "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64".
  std::istringstream config(openblas_get_config());
  std::string library, version;
  config >> library >> version;
  const int threads = openblas_get_num_threads();
  return library + " " + version + ", " + host_blas_kernels() + " kernels" +
         (set_by_user      ? " (OPENBLAS_CORETYPE)"
          : kernels_chosen ? " (from the CPU's features)"
                           : "") +
         ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads") + " per rank";
}

void use_one_blas_thread() {
  openblas_set_num_threads(1);
}

}  // namespace layers
