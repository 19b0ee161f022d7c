// A checkpoint manifest from arbitrary bytes. Parsing either gives a Manifest that writes back to
// JSON which parses to the same Manifest, or throws CheckpointError; any other outcome (another
// exception, a crash, a sanitizer report) is a bug.

#include <cohort/checkpoint/manifest.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  cohort::Manifest manifest;
  try {
    manifest = cohort::parse_manifest(input);
  } catch (const cohort::CheckpointError&) {
    return 0;
  }
  const std::string written = cohort::to_json(manifest);
  if (cohort::to_json(cohort::parse_manifest(written)) != written) std::abort();
  return 0;
}
