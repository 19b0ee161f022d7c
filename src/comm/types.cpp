#include <cohort/comm/types.hpp>

#include <cohort/core/format.hpp>

#include <cstdio>
#include <sstream>

namespace cohort {

std::string_view to_string(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
  }
  return "unknown";
}

std::string_view to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::gloo:
      return "gloo";
    case Backend::nccl:
      return "nccl";
    case Backend::shm:
      return "shm";
    case Backend::hierarchical:
      return "hierarchical";
  }
  return "unknown";
}

std::string_view to_string(HostTransport transport) noexcept {
  switch (transport) {
    case HostTransport::automatic:
      return "automatic";
    case HostTransport::shm:
      return "shm";
    case HostTransport::gloo:
      return "gloo";
  }
  return "unknown";
}

std::string_view to_string(CollectiveOp op) noexcept {
  switch (op) {
    case CollectiveOp::all_reduce:
      return "all_reduce";
    case CollectiveOp::reduce_scatter:
      return "reduce_scatter";
    case CollectiveOp::all_gather:
      return "all_gather";
    case CollectiveOp::broadcast:
      return "broadcast";
    case CollectiveOp::barrier:
      return "barrier";
  }
  return "unknown";
}

std::string CollectiveRecord::describe() const {
  std::ostringstream out;
  out << '#' << sequence << ' ' << to_string(op);
  if (op != CollectiveOp::barrier) {
    out << ' ' << count << " x " << to_string(dtype) << " (" << format_bytes(bytes) << ')';
  }
  if (op == CollectiveOp::all_reduce || op == CollectiveOp::reduce_scatter) {
    out << ' ' << to_string(reduce);
  }
  if (op == CollectiveOp::broadcast) {
    out << " from root " << root;
  }
  switch (state) {
    case State::issued:
      out << ": in flight for " << static_cast<long long>(issued_seconds_ago * 1000.0) << " ms";
      break;
    case State::completed: {
      char text[48];
      std::snprintf(text, sizeof(text), ": completed in %.3f ms", duration_ms);
      out << text;
      break;
    }
    case State::failed:
      out << ": failed after " << static_cast<long long>(duration_ms) << " ms";
      break;
  }
  return out.str();
}

}  // namespace cohort
