#pragma once

/// @file
/// The host GEMM of `layers::Math`: OpenBLAS, one thread per caller, with kernels chosen again from
/// the CPU's features before main where OpenBLAS took the CPU for one without AVX2 (Note [OpenBLAS
/// kernels] in host_blas.cpp).

#include <string>
#include <string_view>

namespace layers {

/// The OpenBLAS kernel family this CPU's features call for ("SkylakeX" with AVX-512 F, DQ, BW and
/// VL enabled by the OS, "Haswell" with AVX2 and FMA), or empty where OpenBLAS's own choice
/// stands.
std::string host_blas_kernels_for_this_cpu();

/// True for OpenBLAS's x86-64 kernel families without AVX2 ("Prescott", "Nehalem", "Sandybridge",
/// ...; names compared without case).
bool host_blas_kernels_lack_avx2(std::string_view kernels);

/// The kernel family OpenBLAS runs ("SkylakeX", "Haswell", ...).
std::string host_blas_kernels();

/// True when OPENBLAS_CORETYPE was set before this program started (the user's choice, kept).
bool host_blas_kernels_set_by_user() noexcept;

/// True when this program had OpenBLAS choose its kernels again from the CPU's features.
bool host_blas_kernels_chosen_from_features() noexcept;

/// One line: library, version, kernels and threads ("OpenBLAS 0.3.21, SkylakeX kernels, 1 thread
/// per rank"), for logs and benchmark reports.
std::string describe_host_blas();

/// Makes OpenBLAS run on the calling thread alone: ranks are threads or processes that already
/// share the cores.
void use_one_blas_thread();

}  // namespace layers
