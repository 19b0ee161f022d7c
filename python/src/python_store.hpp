#pragma once

// `PythonStore`: a cohort `Store` over a torch.distributed store object (FileStore, HashStore,
// a PrefixStore over either), for the process groups whose store is not a TCPStore; over a
// TCPStore the backend speaks to its server directly (`TorchStore`), without the GIL.

#include <cohort/launch/store.hpp>

#include <nanobind/nanobind.h>

namespace cohort::python {

/// Every call takes the GIL, so the threads that call it (the watchdog's) must never wait for a
/// thread that holds the GIL while it waits for them: every entry point of the package releases
/// the GIL before it enters the library.
/// Set at interpreter exit (an atexit handler, with the GIL): from then on a PythonStore fails
/// every call instead of taking the GIL of an interpreter that is going away; returns once the
/// calls already in flight have returned (Note [Python stores at interpreter exit]).
void set_interpreter_exiting() noexcept;

class PythonStore final : public Store {
 public:
  PythonStore(nanobind::object store, Milliseconds timeout);
  ~PythonStore() override;

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key, Milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  bool remove(std::string_view key) override;
  std::unique_ptr<Store> clone() const override;
  std::string describe() const override;
  using Store::get;
  using Store::wait;

 private:
  nanobind::object store_;
  std::string name_;
};

}  // namespace cohort::python
