#include "python_store.hpp"

#include <cohort/core/error.hpp>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <cctype>

namespace nb = nanobind;

namespace cohort::python {

namespace {

std::atomic<bool> exiting{false};

nb::object timedelta(Milliseconds timeout) {
  // Leaked: a static object would be released after the interpreter is gone.
  static nb::handle make = nb::object(nb::module_::import_("datetime").attr("timedelta")).release();
  return make(nb::arg("milliseconds") = timeout.count());
}

nb::bytes bytes_of(std::string_view text) {
  return nb::bytes(text.data(), text.size());
}

std::string text_of(const nb::handle& value) {
  if (nb::isinstance<nb::bytes>(value)) {
    const auto bytes = nb::borrow<nb::bytes>(value);
    return std::string(bytes.c_str(), bytes.size());
  }
  return nb::cast<std::string>(nb::str(value));
}

/// Runs a call on the Python store with the GIL, turning its Python errors into cohort's: a
/// store timeout (torch raises DistStoreError or RuntimeError "Wait timeout") into TimeoutError.
template <typename Fn>
auto call_store(const std::string& store, const char* what, Fn&& fn) {
  COHORT_CHECK(!exiting.load(), Error, store + " " + what + ": the Python interpreter is exiting");
  nb::gil_scoped_acquire gil;
  try {
    return fn();
  } catch (nb::python_error& error) {
    std::string message = error.what();
    std::string lower = message;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (lower.find("timeout") != std::string::npos ||
        lower.find("timed out") != std::string::npos) {
      COHORT_FAIL(TimeoutError, store + " " + what + ": " + message);
    }
    COHORT_FAIL(Error, store + " " + what + ": " + message);
  }
}

}  // namespace

void set_interpreter_exiting() noexcept {
  exiting.store(true);
}

PythonStore::PythonStore(nb::object store, Milliseconds timeout)
    : Store(timeout), store_(std::move(store)) {
  nb::gil_scoped_acquire gil;
  name_ = "torch " + nb::cast<std::string>(nb::handle(store_.type()).attr("__name__"));
}

PythonStore::~PythonStore() {
  if (exiting.load() || !Py_IsInitialized()) {
    store_.release();  // the interpreter is gone; nothing to give back to it
    return;
  }
  nb::gil_scoped_acquire gil;
  store_.reset();
}

void PythonStore::set(std::string_view key, std::string_view value) {
  call_store(name_, "set", [&] { store_.attr("set")(std::string(key), bytes_of(value)); });
}

std::string PythonStore::get(std::string_view key, Milliseconds timeout) {
  wait({std::string(key)}, timeout);
  return call_store(name_, "get", [&] { return text_of(store_.attr("get")(std::string(key))); });
}

void PythonStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  call_store(name_, "wait", [&] { store_.attr("wait")(keys, timedelta(timeout)); });
}

bool PythonStore::check(const std::vector<std::string>& keys) {
  return call_store(name_, "check", [&] { return nb::cast<bool>(store_.attr("check")(keys)); });
}

std::int64_t PythonStore::add(std::string_view key, std::int64_t delta) {
  return call_store(name_, "add", [&] {
    return nb::cast<std::int64_t>(store_.attr("add")(std::string(key), delta));
  });
}

std::string PythonStore::compare_set(std::string_view key, std::string_view expected,
                                     std::string_view desired) {
  return call_store(name_, "compare_set", [&] {
    return text_of(
        store_.attr("compare_set")(std::string(key), bytes_of(expected), bytes_of(desired)));
  });
}

bool PythonStore::remove(std::string_view key) {
  // Some torch stores cannot delete keys; a key left behind costs only its bytes.
  if (exiting.load()) return false;
  nb::gil_scoped_acquire gil;
  try {
    return nb::cast<bool>(store_.attr("delete_key")(std::string(key)));
  } catch (nb::python_error&) {
    return false;
  }
}

std::unique_ptr<Store> PythonStore::clone() const {
  COHORT_CHECK(!exiting.load(), Error, name_ + " clone: the Python interpreter is exiting");
  nb::gil_scoped_acquire gil;
  nb::object copy = store_;
  try {
    copy = store_.attr("clone")();
  } catch (nb::python_error&) {
    // Stores without clone() are shared; torch's stores are safe to call from several threads.
  }
  return std::make_unique<PythonStore>(std::move(copy), timeout());
}

std::string PythonStore::describe() const {
  return name_;
}

}  // namespace cohort::python
