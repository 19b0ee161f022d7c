/// cohort-store: a standalone TCP store server, for runs whose launcher does not host one.
///
///     cohort-store --host 0.0.0.0 --port 29500 [--token T] [--max-message-bytes N]
///
/// Prints "cohort-store listening on HOST:PORT" once it accepts connections, then serves until
/// SIGINT or SIGTERM and exits 0. The token defaults to COHORT_STORE_TOKEN from the environment.

#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>
#include <cohort/launch/tcp_store.hpp>

#include <CLI/CLI.hpp>
#include <cli_checks.hpp>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

int main(int argc, char** argv) {
  CLI::App app{
      "cohort-store: a standalone TCP key-value store server for cohort runs (the "
      "rendezvous of ranks launched by hand or by a launcher that hosts no store).",
      "cohort-store"};
  cohort::cli::conventions(app);
  cohort::TcpStoreServerOptions options;
  options.port = 29500;
  std::optional<std::string> token;
  app.add_option("--host", options.host, "Address to listen on (0.0.0.0: every interface)")
      ->capture_default_str();
  app.add_option("--port", options.port, "Port to listen on (0: a free one)")
      ->capture_default_str()
      ->check(cohort::cli::whole(0, 65535));
  app.add_option("--token", token,
                 "Token clients must present (default: COHORT_STORE_TOKEN, else none)");
  app.add_option("--max-message-bytes", options.max_message_bytes,
                 "Largest request accepted; a longer one closes its connection")
      ->capture_default_str()
      ->check(cohort::cli::whole(64, 4.0 * 1024 * 1024 * 1024));
  if (const std::optional<int> status = cohort::cli::parse(app, argc, argv)) return *status;

  if (token) {
    options.token = *token;
  } else {
    options.token = cohort::env::store_token();
  }

  // Block the stop signals before the server thread starts, so that it inherits the mask and the
  // signals reach sigwait() below instead of interrupting some thread at a random point.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  try {
    cohort::TcpStoreServer server(options);
    std::cout << "cohort-store listening on " << options.host << ":" << server.port() << std::endl;
    int signal_number = 0;
    while (sigwait(&stop_signals, &signal_number) != 0) {
    }
    server.stop();
  } catch (const cohort::Error& error) {
    std::cerr << "cohort-store: " << error.what() << std::endl;
    return EXIT_FAILURE;
  }
  return EXIT_SUCCESS;
}
