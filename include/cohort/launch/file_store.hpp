#pragma once

/// @file
/// A store kept as files in a folder of a file system every rank can see.

#include <cohort/launch/store.hpp>

#include <filesystem>

namespace cohort {

/// Keys live in `<root>/<run_id>/`, one file each, written to a temporary name and renamed so a
/// reader never sees half a value. `add` and `compare_set` hold an open-file-description lock
/// (`F_OFD_SETLK`, polled against the deadline). The run id keeps files of an earlier run in
/// another folder, so they never confuse a new one; `cohortrun` and the launch environment give
/// each run its own id (see `LaunchInfo::run_id`).
class FileStore final : public Store {
 public:
  /// @throws InvalidArgument when `run_id` is empty or not a plain file name, or when the folder
  ///         cannot be created (the message gives the path and the system's reason).
  FileStore(std::filesystem::path root, std::string run_id, Milliseconds timeout = kDefaultTimeout);
  ~FileStore() override;

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

  /// The folder this run's keys live in.
  const std::filesystem::path& folder() const noexcept { return folder_; }

 private:
  std::filesystem::path root_;
  std::string run_id_;
  std::filesystem::path folder_;
};

}  // namespace cohort
