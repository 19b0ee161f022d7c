#pragma once

// Arrays from any framework, as cohort views: NumPy, PyTorch, CuPy, JAX... through DLPack or the
// buffer protocol (nanobind's ndarray), checked so that a wrong one gets an error that says what
// to do, never a crash or a silently wrong result.

#include <cohort/comm/types.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

namespace cohort::python {

/// An imported array and its view. The view is valid while `array` lives.
struct Array {
  nanobind::ndarray<> array;
  TensorView view;
};

/// Imports `object` as the `role` ("input", "output", "data") of `call` ("all_reduce").
/// @throws nanobind::type_error when it is not an array (no DLPack, no buffer protocol);
///         nanobind::value_error when it is read-only, not C-contiguous, of a dtype cohort does
///         not move, or on a device that is neither the host nor a CUDA GPU.
Array import_array(nanobind::handle object, const char* call, const char* role);

/// "float32[4, 256] on cpu" for error messages.
std::string describe_array(const nanobind::ndarray<>& array);

}  // namespace cohort::python
