// A program that uses cohort as an installed package would.
#include <cohort/cohort.hpp>

#include <cstdio>
#include <cstring>

int main() {
  if (std::strcmp(cohort::version(), COHORT_VERSION_STRING) != 0) {
    std::fprintf(stderr, "library %s but headers %s\n", cohort::version(), COHORT_VERSION_STRING);
    return 1;
  }
  cohort::MemoryStore store;
  store.set("answer", "42");
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  int seen = 0;
  stream.enqueue([&] { seen = std::stoi(store.get("answer")); });
  stream.synchronize();
  if (seen != 42) {
    std::fprintf(stderr, "store or stream gave %d\n", seen);
    return 1;
  }
  std::printf("cohort %s, %s, a store and a stream work\n", cohort::version(),
              cohort::built_with_cuda() ? "CUDA backend" : "host backend");
  return 0;
}
