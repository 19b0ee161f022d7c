#include "python_store.hpp"

#include <cohort/core/error.hpp>
#include <cohort/launch/detail/store_messages.hpp>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <thread>

namespace nb = nanobind;

namespace cohort::python {

namespace {

// Note [Python stores at interpreter exit]
// The watchdog polls the store from its own thread (a published failure of another rank). A
// thread that takes the GIL once the interpreter is finalizing is ended by Python with
// pthread_exit, whose unwinding through the library's noexcept frames calls std::terminate: a
// process that left without destroy_process_group (PyTorch's own tests do, on a skip) died of
// SIGABRT at exit. So `exiting` is set by an atexit handler, which runs before finalization,
// and every call counts itself in `calls_in_flight` before it looks at `exiting` (both
// sequentially consistent: a call that does not see `exiting` is counted before the handler
// reads the count). The handler then lets go of the GIL until the counted calls have returned,
// at most kExitPatience; calls are short, since waits go in slices of kWaitSlice. After the
// handler no thread of the library takes the GIL again.
std::atomic<bool> exiting{false};
std::atomic<int> calls_in_flight{0};
constexpr auto kExitPatience = std::chrono::seconds(5);
constexpr auto kWaitSlice = std::chrono::milliseconds(200);

/// Counts a call into the Python store for the whole of its life.
struct CountedCall {
  CountedCall() noexcept { calls_in_flight.fetch_add(1); }
  ~CountedCall() { calls_in_flight.fetch_sub(1); }
  CountedCall(const CountedCall&) = delete;
  CountedCall& operator=(const CountedCall&) = delete;
};

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
  const CountedCall counted;
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
  // Called from Python (atexit) with the GIL: the calls in flight need it to return.
  PyThreadState* state = PyEval_SaveThread();
  const auto until = std::chrono::steady_clock::now() + kExitPatience;
  while (calls_in_flight.load() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  PyEval_RestoreThread(state);
}

PythonStore::PythonStore(nb::object store, Milliseconds timeout)
    : Store(timeout), store_(std::move(store)) {
  nb::gil_scoped_acquire gil;
  name_ = "torch " + nb::cast<std::string>(nb::handle(store_.type()).attr("__name__"));
}

PythonStore::~PythonStore() {
  const CountedCall counted;
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
  // In slices (Note [Python stores at interpreter exit]): between two, the call holds nothing.
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    const auto waited =
        std::chrono::duration_cast<Milliseconds>(std::chrono::steady_clock::now() - start);
    const Milliseconds slice = std::min<Milliseconds>(timeout - waited, kWaitSlice);
    if (slice.count() <= 0) {
      break;
    }
    try {
      call_store(name_, "wait", [&] { store_.attr("wait")(keys, timedelta(slice)); });
      return;
    } catch (const TimeoutError&) {
      // the slice passed; the next one, unless the whole timeout has
    }
  }
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (!check({key})) {
      missing.push_back(key);
    }
  }
  if (missing.empty()) {
    return;  // set just now
  }
  COHORT_FAIL(TimeoutError, detail::timeout_message(name_, missing, timeout));
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
  const CountedCall counted;
  if (exiting.load()) return false;
  nb::gil_scoped_acquire gil;
  try {
    return nb::cast<bool>(store_.attr("delete_key")(std::string(key)));
  } catch (nb::python_error&) {
    return false;
  }
}

std::unique_ptr<Store> PythonStore::clone() const {
  const CountedCall counted;
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
