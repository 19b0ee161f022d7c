#include "arrays.hpp"

#include <optional>
#include <string>

namespace nb = nanobind;

namespace cohort::python {

namespace {

using Code = nb::dlpack::dtype_code;

std::string dpython_type_name(nb::dlpack::dtype dtype) {
  std::string base;
  switch (static_cast<Code>(dtype.code)) {
    case Code::Int:
      base = "int";
      break;
    case Code::UInt:
      base = "uint";
      break;
    case Code::Float:
      base = "float";
      break;
    case Code::Bfloat:
      base = "bfloat";
      break;
    case Code::Complex:
      base = "complex";
      break;
    case Code::Bool:
      return "bool";
    default:
      base = "dlpack-code-" + std::to_string(dtype.code) + "-";
      break;
  }
  std::string name = base + std::to_string(dtype.bits);
  if (dtype.lanes != 1) {
    name += "x" + std::to_string(dtype.lanes);
  }
  return name;
}

std::optional<DType> dtype_of(nb::dlpack::dtype dtype) {
  if (dtype.lanes != 1) {
    return std::nullopt;
  }
  switch (static_cast<Code>(dtype.code)) {
    case Code::Float:
      if (dtype.bits == 32) return DType::f32;
      if (dtype.bits == 64) return DType::f64;
      if (dtype.bits == 16) return DType::f16;
      break;
    case Code::Bfloat:
      if (dtype.bits == 16) return DType::bf16;
      break;
    case Code::Int:
      if (dtype.bits == 32) return DType::i32;
      if (dtype.bits == 64) return DType::i64;
      break;
    case Code::UInt:
      if (dtype.bits == 8) return DType::u8;
      break;
    default:
      break;
  }
  return std::nullopt;
}

std::string device_name(const nb::ndarray<>& array) {
  switch (array.device_type()) {
    case nb::device::cpu::value:
      return "cpu";
    case nb::device::cuda::value:
      return "cuda:" + std::to_string(array.device_id());
    case nb::device::cuda_host::value:
      return "cuda_host";
    case nb::device::cuda_managed::value:
      return "cuda_managed:" + std::to_string(array.device_id());
    default:
      return "DLPack device type " + std::to_string(array.device_type());
  }
}

std::string python_type_name(nb::handle object) {
  return nb::cast<std::string>(nb::handle(object.type()).attr("__module__")) + "." +
         nb::cast<std::string>(nb::handle(object.type()).attr("__qualname__"));
}

bool c_contiguous(const nb::ndarray<>& array) {
  if (array.size() == 0) {
    return true;  // nothing to lay out
  }
  std::int64_t expected = 1;
  for (std::size_t i = array.ndim(); i-- > 0;) {
    if (array.shape(i) != 1 && array.stride(i) != expected) {
      return false;
    }
    expected *= static_cast<std::int64_t>(array.shape(i));
  }
  return true;
}

}  // namespace

std::string describe_array(const nb::ndarray<>& array) {
  std::string text = dpython_type_name(array.dtype()) + "[";
  for (std::size_t i = 0; i < array.ndim(); ++i) {
    text += (i > 0 ? ", " : "") + std::to_string(array.shape(i));
  }
  return text + "] on " + device_name(array);
}

Array import_array(nb::handle object, const char* call, const char* role) {
  const std::string where = std::string("cohort ") + call + ": the " + role + " ";
  Array result{nb::ndarray<>(), TensorView(nullptr, 0, DType::u8, Device::host())};
  if (!nb::try_cast(object, result.array, /*convert=*/false)) {
    nb::ndarray<nb::ro> read_only;
    if (nb::try_cast(object, read_only, /*convert=*/false)) {
      throw nb::value_error(
          (where + "(" + python_type_name(object) +
           ") is read-only, and collectives write their result into it; pass a writable array "
           "(for NumPy, np.array(x) copies a read-only one, or set x.flags.writeable = True if "
           "you own its memory)")
              .c_str());
    }
    std::string hint;
    if (nb::hasattr(object, "requires_grad") && nb::cast<bool>(object.attr("requires_grad"))) {
      hint = " A tensor that requires grad cannot be exported: pass tensor.detach().";
    }
    throw nb::type_error((where + "is a " + python_type_name(object) +
                          ", which is not an array: cohort takes any object with __dlpack__ or "
                          "the buffer protocol (NumPy, PyTorch, CuPy, JAX arrays)." +
                          hint)
                             .c_str());
  }
  const nb::ndarray<>& array = result.array;
  if (!c_contiguous(array)) {
    throw nb::value_error((where + describe_array(array) +
                           " is not contiguous; collectives need one dense block of memory: pass "
                           "a contiguous copy (np.ascontiguousarray(x), x.contiguous()) and copy "
                           "the result back")
                              .c_str());
  }
  const std::optional<DType> dtype = dtype_of(array.dtype());
  if (!dtype) {
    throw nb::value_error(
        (where + describe_array(array) + " has dtype " + dpython_type_name(array.dtype()) +
         ", which cohort does not move; use float32, float64, float16, bfloat16, int32, int64 "
         "or uint8 (a uint8 view carries any dtype's bytes through broadcast and all_gather)")
            .c_str());
  }
  Device device = Device::host();
  switch (array.device_type()) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value:
      break;
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value:
      device = Device::cuda(array.device_id());
      break;
    default:
      throw nb::value_error((where + describe_array(array) +
                             " is on a device cohort does not work with; it takes host memory "
                             "and CUDA memory")
                                .c_str());
  }
  result.view = TensorView(array.data(), array.size(), *dtype, device);
  return result;
}

}  // namespace cohort::python
