// Deleting old checkpoints off the save's path (Note [Checkpoint deletion]).

#include "checkpointer_impl.hpp"

#include <filesystem>

namespace cohort {

// Note [Checkpoint deletion]
// Deleting an old checkpoint took as long as writing the new one on a disk mounted with
// `discard` (each unlink of a large file waits for its blocks to be discarded). So a save only
// renames what it deletes to `.deleting-<name>` (a rename: no checkpoint is half deleted under
// its own name, and loads ignore dot-names), and a low-priority thread deletes those folders
// while training goes on. The next publish and the destructor wait for it; a crash leaves
// `.deleting-` folders, which the next save's deletion removes too.
void Checkpointer::Impl::delete_in_background(const std::filesystem::path& root,
                                              const std::vector<std::string>& names) {
  finish_deleting();
  for (const std::string& name : names) {
    const std::string hidden = name.starts_with(".") ? name.substr(1) : name;
    std::error_code error;
    std::filesystem::rename(root / name, root / (".deleting-" + hidden), error);
    if (error) std::filesystem::remove_all(root / name, error);  // a leftover holds that name
  }
  deleter = std::thread([root] {
    detail::lower_thread_priority();
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
      if (entry.path().filename().string().starts_with(".deleting-")) {
        std::error_code ignored;
        std::filesystem::remove_all(entry.path(), ignored);
      }
    }
  });
}

void Checkpointer::Impl::finish_deleting() noexcept {
  if (deleter.joinable()) deleter.join();
}

}  // namespace cohort
