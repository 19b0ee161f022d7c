// cohort-doctor: what this machine offers for training with cohort, and what would hurt.
//
//   cohort-doctor          # a report for people
//   cohort-doctor --json   # the same as one JSON object
//
// Exit status: 0 when no finding is an error, 2 when one is, 1 for bad command-line arguments.

#include "probe.hpp"
#include "report.hpp"

#include <cohort/version.hpp>

#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{
      "cohort-doctor: checks this machine for training with cohort (GPUs, CUDA, NCCL, "
      "cuBLAS, cuDNN, peer access, launcher, environment, /dev/shm, limits) and says "
      "what to fix.\nExit status: 0 when nothing is an error, 2 when something is.",
      "cohort-doctor"};
  bool json = false;
  app.add_flag("--json", json, "Print the findings as one JSON object");
  app.set_version_flag("--version", std::string("cohort-doctor ") + cohort::version());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // --help and --version end here too, with status 0.
    return app.exit(error) == 0 ? 0 : 1;
  }

  try {
    cohort::doctor::Report report;
    cohort::doctor::probe_host(report);
    cohort::doctor::probe_cuda(report);
    const std::vector<cohort::doctor::Finding> findings = cohort::doctor::diagnose(report);
    if (json) {
      std::cout << cohort::doctor::to_json(report, findings).dump(2) << '\n';
    } else {
      std::cout << cohort::doctor::render_text(report, findings);
    }
    std::cout.flush();
    return cohort::doctor::exit_status(findings);
  } catch (const std::exception& error) {
    std::cerr << "cohort-doctor: " << error.what() << '\n';
    return 2;
  }
}
