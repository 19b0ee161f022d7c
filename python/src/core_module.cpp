// cohort._core: the library's worlds and communicators for Python, over any DLPack array, and
// the groups that the torch backend (cohort._torch) runs on (Note [Two extension modules] in
// bridge.hpp).

#include "arrays.hpp"
#include "bridge.hpp"
#include "python_store.hpp"
#include "world_group.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/launch/torch_store.hpp>
#include <cohort/version.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace nb = nanobind;

namespace cohort::python {
namespace {

// ---- Errors: cohort.Error (RuntimeError), cohort.TimeoutError (also the builtin TimeoutError),
// cohort.InvalidArgument (also ValueError) ----

PyObject* error_type = nullptr;
PyObject* timeout_type = nullptr;
PyObject* invalid_argument_type = nullptr;

void register_errors(nb::module_& m) {
  error_type = PyErr_NewExceptionWithDoc("cohort.Error", "A failure inside cohort.",
                                         PyExc_RuntimeError, nullptr);
  nb::object timeout_bases = nb::make_tuple(nb::handle(error_type), nb::handle(PyExc_TimeoutError));
  timeout_type = PyErr_NewExceptionWithDoc(
      "cohort.TimeoutError",
      "A deadline passed: a rank that never arrived at a collective, a store key never set.",
      timeout_bases.ptr(), nullptr);
  nb::object invalid_bases = nb::make_tuple(nb::handle(error_type), nb::handle(PyExc_ValueError));
  invalid_argument_type = PyErr_NewExceptionWithDoc(
      "cohort.InvalidArgument", "An argument or setting cohort cannot work with.",
      invalid_bases.ptr(), nullptr);
  m.attr("Error") = nb::handle(error_type);
  m.attr("TimeoutError") = nb::handle(timeout_type);
  m.attr("InvalidArgument") = nb::handle(invalid_argument_type);
  nb::register_exception_translator([](const std::exception_ptr& error, void*) {
    try {
      std::rethrow_exception(error);
    } catch (const InvalidArgument& e) {
      PyErr_SetString(invalid_argument_type, e.what());
    } catch (const TimeoutError& e) {
      PyErr_SetString(timeout_type, e.what());
    } catch (const Error& e) {
      PyErr_SetString(error_type, e.what());
    }
  });
}

// ---- Arguments ----

ReduceOp parse_op(const std::string& op) {
  if (op == "sum") return ReduceOp::sum;
  if (op == "avg" || op == "mean") return ReduceOp::avg;
  if (op == "min") return ReduceOp::min;
  if (op == "max") return ReduceOp::max;
  throw nb::value_error(
      ("cohort: op '" + op + "' is not a reduction cohort runs; use 'sum', 'avg', 'min' or 'max'")
          .c_str());
}

std::chrono::milliseconds parse_timeout(const nb::handle& timeout) {
  double seconds = 0;
  if (nb::hasattr(timeout, "total_seconds")) {
    seconds = nb::cast<double>(timeout.attr("total_seconds")());
  } else {
    seconds = nb::cast<double>(timeout);
  }
  if (!(seconds > 0) || seconds > 30.0 * 24 * 3600) {
    throw nb::value_error(
        "cohort: timeout must be a positive number of seconds (or a timedelta) "
        "of at most 30 days");
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0 + 0.5));
}

/// The CUDA stream a caller passed: None (the legacy default stream), an int (a cudaStream_t),
/// or an object that knows its handle: `__cuda_stream__()` (the CUDA stream protocol),
/// `.cuda_stream` (torch.cuda.Stream) or `.ptr` (cupy.cuda.Stream).
void* parse_stream(const nb::handle& stream) {
  if (stream.is_none()) {
    return nullptr;
  }
  if (nb::isinstance<nb::int_>(stream)) {
    return reinterpret_cast<void*>(nb::cast<std::uintptr_t>(stream));
  }
  if (nb::hasattr(stream, "__cuda_stream__")) {
    nb::object pair = stream.attr("__cuda_stream__")();
    return reinterpret_cast<void*>(nb::cast<std::uintptr_t>(pair[1]));
  }
  for (const char* attribute : {"cuda_stream", "ptr"}) {
    if (nb::hasattr(stream, attribute)) {
      return reinterpret_cast<void*>(nb::cast<std::uintptr_t>(stream.attr(attribute)));
    }
  }
  throw nb::type_error(
      "cohort: stream must be None, an int (a cudaStream_t), or a stream object "
      "with __cuda_stream__, .cuda_stream or .ptr");
}

// ---- The framework-neutral API ----

/// A World shared by the Python objects that refer to it.
struct WorldHolder {
  explicit WorldHolder(World w) : world(std::move(w)) {}
  World world;
};

class PyWork {
 public:
  PyWork(Work work, std::vector<nb::object> keep)
      : work_(std::move(work)), keep_(std::move(keep)) {}

  bool done() const { return work_.done(); }

  void wait(const nb::handle& timeout) {
    if (timeout.is_none()) {
      nb::gil_scoped_release release;
      work_.wait();
    } else {
      const auto limit = parse_timeout(timeout);
      nb::gil_scoped_release release;
      work_.wait(limit);
    }
  }

  std::uint64_t sequence() const { return work_.sequence(); }
  std::string op() const { return std::string(to_string(work_.op())); }

 private:
  Work work_;
  std::vector<nb::object> keep_;  // the arrays, alive until this Work goes
};

class PyCommunicator {
 public:
  PyCommunicator(std::shared_ptr<WorldHolder> owner, Communicator* comm)
      : owner_(std::move(owner)), comm_(comm) {}
  PyCommunicator(std::shared_ptr<WorldHolder> owner, std::unique_ptr<Communicator> comm)
      : owner_(std::move(owner)), owned_(std::move(comm)), comm_(owned_.get()) {}

  Communicator& comm() const {
    if (comm_ == nullptr || !owner_) {
      throw nb::value_error("cohort: this communicator's world was closed");
    }
    return *comm_;
  }
  int rank() const { return comm().rank(); }
  int size() const { return comm().size(); }
  std::string name() const { return comm().name(); }
  std::string backend() const { return std::string(to_string(comm().backend())); }
  std::string device() const { return comm().device().to_string(); }

  PyWork all_reduce(nb::handle data, const std::string& op, nb::handle output, nb::handle stream,
                    bool async_op) {
    const ReduceOp reduce = parse_op(op);
    Array in = import_array(data, "all_reduce", "data");
    Array out = output.is_none() ? in : import_array(output, "all_reduce", "output");
    return run({in, out}, stream, async_op,
               [&](const Stream& s) { return comm().all_reduce(in.view, out.view, reduce, s); });
  }

  PyWork reduce_scatter(nb::handle input, nb::handle output, const std::string& op,
                        nb::handle stream, bool async_op) {
    const ReduceOp reduce = parse_op(op);
    Array in = import_array(input, "reduce_scatter", "input");
    Array out = import_array(output, "reduce_scatter", "output");
    return run({in, out}, stream, async_op, [&](const Stream& s) {
      return comm().reduce_scatter(in.view, out.view, reduce, s);
    });
  }

  PyWork all_gather(nb::handle input, nb::handle output, nb::handle stream, bool async_op) {
    Array in = import_array(input, "all_gather", "input");
    Array out = import_array(output, "all_gather", "output");
    return run({in, out}, stream, async_op,
               [&](const Stream& s) { return comm().all_gather(in.view, out.view, s); });
  }

  PyWork broadcast(nb::handle data, int root, nb::handle stream, bool async_op) {
    Array buffer = import_array(data, "broadcast", "data");
    return run({buffer}, stream, async_op,
               [&](const Stream& s) { return comm().broadcast(buffer.view, root, s); });
  }

  PyWork barrier(bool async_op) {
    return run({}, nb::none(), async_op, [&](const Stream& s) { return comm().barrier(s); });
  }

  std::optional<PyCommunicator> split(int color, std::optional<int> key, std::string name) {
    const int order = key.value_or(comm().rank());
    std::unique_ptr<Communicator> child;
    {
      nb::gil_scoped_release release;
      child = comm().split(color, order, std::move(name));
    }
    if (!child) {
      return std::nullopt;
    }
    return PyCommunicator(owner_, std::move(child));
  }

  void abort(const std::string& reason) { comm().abort(reason); }
  bool aborted() const { return comm().aborted(); }

  std::vector<std::string> recent_collectives() const {
    std::vector<std::string> lines;
    for (const CollectiveRecord& record : comm().recent_collectives()) {
      lines.push_back(record.describe());
    }
    return lines;
  }

  void release() {
    owned_.reset();
    comm_ = nullptr;
  }

 private:
  /// Issues `issue` on the stream the arrays call for, keeping them alive in the Work; waits
  /// for host arrays unless `async_op`.
  template <typename Issue>
  PyWork run(std::vector<Array> arrays, nb::handle stream, bool async_op, Issue&& issue) {
    Device device = comm().device();
    for (const Array& array : arrays) {
      if (array.view.device() != device) {
        throw nb::value_error(("cohort: the array is on " + array.view.device().to_string() +
                               " but communicator '" + comm().name() + "' works on " +
                               device.to_string() +
                               (device.is_host() ? ": copy it to the host first"
                                                 : ": pass arrays on this rank's GPU"))
                                  .c_str());
      }
    }
    if (device.is_host() && !stream.is_none()) {
      throw nb::value_error(
          "cohort: stream is for collectives on CUDA arrays; host arrays take "
          "none (async_op=True returns before the collective is done)");
    }
    void* cuda_stream = parse_stream(stream);
    std::vector<nb::object> keep;
    for (const Array& array : arrays) {
      keep.push_back(nb::cast(array.array));
    }
    Work work;
    {
      nb::gil_scoped_release release;
      if (device.is_host()) {
        std::size_t bytes = 0;
        for (const Array& array : arrays) bytes = std::max(bytes, array.view.bytes());
        work = issue(host_streams_.choose(bytes, async_op));
        if (!async_op) {
          work.wait();
        }
      } else {
        work = issue(Stream::wrap_cuda(device, cuda_stream));
      }
    }
    return PyWork(std::move(work), std::move(keep));
  }

  std::shared_ptr<WorldHolder> owner_;
  std::unique_ptr<Communicator> owned_;
  Communicator* comm_ = nullptr;
  HostStreams host_streams_;  // Note [Host streams of the Python API]
};

class PyWorld {
 public:
  explicit PyWorld(World world) : holder_(std::make_shared<WorldHolder>(std::move(world))) {}

  World& world() const {
    if (!holder_) {
      throw nb::value_error("cohort: this world was closed");
    }
    return holder_->world;
  }
  PyCommunicator comm() const { return PyCommunicator(holder_, &world().comm()); }
  PyCommunicator local() const { return PyCommunicator(holder_, &world().local()); }
  PyCommunicator cross() const { return PyCommunicator(holder_, &world().cross()); }

  /// Leaves the world: waits for its collectives, then frees its communicators. Communicators
  /// taken from it keep it alive until they go too.
  void close() {
    std::shared_ptr<WorldHolder> holder = std::move(holder_);
    nb::gil_scoped_release release;
    holder.reset();
  }

 private:
  std::shared_ptr<WorldHolder> holder_;
};

PyWorld init_world(nb::handle timeout, const std::string& backend,
                   std::optional<std::string> host_transport) {
  WorldOptions options;
  if (!timeout.is_none()) options.timeout = parse_timeout(timeout);
  if (backend == "auto") {
    options.backend = BackendChoice::automatic;
  } else if (backend == "nccl") {
    options.backend = BackendChoice::nccl;
  } else if (backend == "host" || backend == "gloo") {
    options.backend = BackendChoice::host;
  } else {
    throw nb::value_error(("cohort.init: backend '" + backend +
                           "' is not one of 'auto' (NCCL when this process sees a GPU), 'nccl', "
                           "'host' (shared memory within a host, Gloo across)")
                              .c_str());
  }
  if (host_transport) {
    if (*host_transport == "shm")
      options.host_transport = HostTransport::shm;
    else if (*host_transport == "gloo")
      options.host_transport = HostTransport::gloo;
    else if (*host_transport == "auto")
      options.host_transport = HostTransport::automatic;
    else
      throw nb::value_error("cohort.init: host_transport must be 'auto', 'shm' or 'gloo'");
  }
  nb::gil_scoped_release release;
  return PyWorld(init(std::move(options)));
}

// ---- Groups for the torch backend ----

/// Joins a group's host world through the store torch handed over: natively when it is a
/// TCPStore (`tcp_host` set), else through the Python store object.
nb::capsule make_group(nb::object store, const std::string& tcp_host, int tcp_port,
                       const std::string& prefix, int rank, int size, nb::handle timeout,
                       int log_rank) {
  const std::chrono::milliseconds deadline = parse_timeout(timeout);
  std::shared_ptr<Store> base;
  if (!tcp_host.empty()) {
    nb::gil_scoped_release release;
    base = std::make_shared<TorchStore>(tcp_host, tcp_port, deadline);
  } else {
    base = std::make_shared<PythonStore>(std::move(store), deadline);
  }
  WorldOptions options;
  options.timeout = deadline;
  options.store = std::make_shared<PrefixStore>(prefix, std::move(base));
  LaunchInfo launch;
  launch.rank = rank;
  launch.world_size = size;
  launch.run_id = prefix;
  options.launch = launch;
  if (log_rank >= 0) {
    set_process_log_rank(log_rank);
  }
  std::shared_ptr<Group> group;
  {
    nb::gil_scoped_release release;
    group = std::make_shared<WorldGroup>(std::move(options));
  }
  auto* handle = new GroupHandle{kBridgeVersion, std::move(group)};
  return nb::capsule(handle, "cohort.group", [](void* p) noexcept {
    // The group's destructor waits for its collectives: never with the GIL held.
    PyThreadState* state = PyGILState_Check() ? PyEval_SaveThread() : nullptr;
    delete static_cast<GroupHandle*>(p);
    if (state) PyEval_RestoreThread(state);
  });
}

std::string group_describe(nb::capsule capsule) {
  auto* handle = static_cast<GroupHandle*>(PyCapsule_GetPointer(capsule.ptr(), "cohort.group"));
  if (handle == nullptr) throw nb::python_error();
  return handle->group->describe();
}

}  // namespace
}  // namespace cohort::python

NB_MODULE(_core, m) {
  using namespace cohort::python;
  m.doc() = "cohort's C++ library: worlds, communicators and collectives over DLPack arrays";
  register_errors(m);
  m.attr("__version__") = cohort::version();
  m.attr("built_with_cuda") = cohort::built_with_cuda();
  m.attr("BRIDGE_VERSION") = kBridgeVersion;

  nb::class_<PyWork>(m, "Work", "One collective in flight.")
      .def("done", &PyWork::done, "Whether it has finished, successfully or not; never blocks.")
      .def("wait", &PyWork::wait, nb::arg("timeout") = nb::none(),
           "Blocks until it has finished and raises its error: cohort.TimeoutError naming the "
           "ranks that never arrived, cohort.Error for other failures. With a timeout (seconds), "
           "raises cohort.TimeoutError if it is still running then (it goes on running).")
      .def_prop_ro("sequence", &PyWork::sequence)
      .def_prop_ro("op", &PyWork::op);

  nb::class_<PyCommunicator>(m, "Communicator", "Collectives over a group of ranks.")
      .def_prop_ro("rank", &PyCommunicator::rank)
      .def_prop_ro("size", &PyCommunicator::size)
      .def_prop_ro("name", &PyCommunicator::name)
      .def_prop_ro("backend", &PyCommunicator::backend)
      .def_prop_ro("device", &PyCommunicator::device)
      .def("all_reduce", &PyCommunicator::all_reduce, nb::arg("data"), nb::arg("op") = "sum",
           nb::kw_only(), nb::arg("output") = nb::none(), nb::arg("stream") = nb::none(),
           nb::arg("async_op") = false)
      .def("reduce_scatter", &PyCommunicator::reduce_scatter, nb::arg("input"), nb::arg("output"),
           nb::arg("op") = "sum", nb::kw_only(), nb::arg("stream") = nb::none(),
           nb::arg("async_op") = false)
      .def("all_gather", &PyCommunicator::all_gather, nb::arg("input"), nb::arg("output"),
           nb::kw_only(), nb::arg("stream") = nb::none(), nb::arg("async_op") = false)
      .def("broadcast", &PyCommunicator::broadcast, nb::arg("data"), nb::arg("root") = 0,
           nb::kw_only(), nb::arg("stream") = nb::none(), nb::arg("async_op") = false)
      .def("barrier", &PyCommunicator::barrier, nb::kw_only(), nb::arg("async_op") = false)
      .def("split", &PyCommunicator::split, nb::arg("color"), nb::arg("key") = nb::none(),
           nb::arg("name") = "split")
      .def("abort", &PyCommunicator::abort, nb::arg("reason"))
      .def_prop_ro("aborted", &PyCommunicator::aborted)
      .def("recent_collectives", &PyCommunicator::recent_collectives)
      .def("_release", &PyCommunicator::release);

  nb::class_<PyWorld>(m, "World", "This process's place among all ranks, and its communicators.")
      .def_prop_ro("rank", [](const PyWorld& w) { return w.world().rank(); })
      .def_prop_ro("size", [](const PyWorld& w) { return w.world().size(); })
      .def_prop_ro("local_rank", [](const PyWorld& w) { return w.world().local_rank(); })
      .def_prop_ro("local_world_size",
                   [](const PyWorld& w) { return w.world().local_world_size(); })
      .def_prop_ro("node_rank", [](const PyWorld& w) { return w.world().node_rank(); })
      .def_prop_ro("num_nodes", [](const PyWorld& w) { return w.world().num_nodes(); })
      .def_prop_ro("device", [](const PyWorld& w) { return w.world().device().to_string(); })
      .def_prop_ro("backend",
                   [](const PyWorld& w) { return std::string(to_string(w.world().backend())); })
      .def_prop_ro("timeout", [](const PyWorld& w) { return w.world().timeout().count() / 1000.0; })
      .def_prop_ro("comm", &PyWorld::comm)
      .def_prop_ro("local", &PyWorld::local)
      .def_prop_ro("cross", &PyWorld::cross)
      .def("describe", [](const PyWorld& w) { return w.world().describe(); })
      .def("close", &PyWorld::close);

  m.def("init", &init_world, nb::arg("timeout") = nb::none(), nb::arg("backend") = "auto",
        nb::arg("host_transport") = nb::none());
  m.def("_make_group", &make_group, nb::arg("store"), nb::arg("tcp_host"), nb::arg("tcp_port"),
        nb::arg("prefix"), nb::arg("rank"), nb::arg("size"), nb::arg("timeout"),
        nb::arg("log_rank") = -1);
  m.def("_group_describe", &group_describe);
  m.def("_interpreter_exiting", &set_interpreter_exiting);
  m.def("_record_failure", [](const std::string& message) { cohort::record_failure(message); });
}
