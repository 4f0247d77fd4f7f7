// ferry-serve's command line (cli.h).
#include "tools/serve/cli.h"

#include <pthread.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <csignal>
#include <cstdio>

#include "models/serve/server.h"
#include "tools/common/command.h"

namespace ferry::serve {

Result<ListenAddress> ParseListenAddress(std::string_view text) {
  const size_t colon = text.rfind(':');
  auto bad = [&] {
    return InvalidArgument("--listen '" + std::string(text) +
                           "' is not HOST:PORT (e.g. 127.0.0.1:8500, 0.0.0.0:8500, [::1]:8500)");
  };
  if (colon == std::string_view::npos) return bad();
  ListenAddress a;
  a.host = std::string(text.substr(0, colon));
  if (a.host.size() >= 2 && a.host.front() == '[' && a.host.back() == ']') {
    a.host = a.host.substr(1, a.host.size() - 2);
  } else if (a.host.find_first_of("[]") != std::string::npos) {
    return bad();
  }
  if (a.host.empty()) a.host = "127.0.0.1";
  const std::string_view port = text.substr(colon + 1);
  auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), a.port);
  if (port.empty() || ec != std::errc() || p != port.data() + port.size() || a.port < 0 ||
      a.port > 65535) {
    return bad();
  }
  return a;
}

int ServeMain(int argc, char** argv) {
  CLI::App app;
  tools::SetUpCommand(
      app,
      {.name = "ferry-serve",
       .summary = "score samples over HTTP with a model that follows ferry-train's exports",
       .description =
           "Loads the newest version of an export directory (ferry-train --export-dir: the "
           "newest base\nand the deltas after it) and answers TensorFlow Serving-style REST "
           "requests:\n  POST /v1/models/NAME:predict  {\"instances\": [\"3:1 17:0.5\", ...]}\n"
           "  GET /v1/models/NAME, GET /healthz, GET /metrics (Prometheus)\n"
           "It polls the directory's MANIFEST and swaps each new version in atomically; a "
           "request is\nscored by one version from start to end, and a version that fails to "
           "load is logged and\nskipped while the current one keeps serving. SIGINT or SIGTERM "
           "stops it.",
       .examples = {"ferry-train --model fm --train tr.txt --export-dir exp --export-every 5m",
                    "ferry-serve --model-dir exp --model-name ctr --listen 127.0.0.1:8500",
                    "curl -d '{\"instances\": [\"3:1 17:0.5\"]}' "
                    "http://127.0.0.1:8500/v1/models/ctr:predict"},
       .exit_status = "0 stopped by a signal; 2 bad command line; 1 serving could not start (the "
                      "reason is on stderr).",
       .see_also = {"ferry-train", "ferry-predict", "docs/serving.md"}});
  models::ServerOptions o;
  std::string listen = "127.0.0.1:8500";
  app.add_option("--model-dir", o.follow.dir,
                 "export directory (ferry-train --export-dir) to serve and follow")
      ->required();
  app.add_option("--model-name", o.model_name, "the NAME in /v1/models/NAME")
      ->capture_default_str();
  app.add_option("--listen", listen, "HOST:PORT to listen on (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "connection worker threads")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--max-body", o.max_body, "largest request body, bytes (larger: 413)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 32))
      ->capture_default_str();
  app.add_option("--timeout", o.timeout_s,
                 "seconds a connection may take to send or receive, or sit idle between requests")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_option("--poll-ms", o.follow.poll_ms, "how often the MANIFEST is read, milliseconds")
      ->check(CLI::Range(10, 3600000))
      ->capture_default_str();
  app.add_option("--format", o.follow.scorer.format,
                 "libsvm, criteo or libffm (default: the model's)")
      ->check(CLI::IsMember({"libsvm", "svmlight", "criteo", "libffm"}));
  app.add_option("--field-map", o.follow.scorer.field_map,
                 "libsvm field map (default: the one the model was trained with)");
  if (std::optional<int> code = tools::ParseCommandLine(app, argc, argv)) return *code;
  auto address = ParseListenAddress(listen);
  if (!address.ok()) return tools::ReportError("ferry-serve", address.status().message(), 2);
  o.host = address->host;
  o.port = address->port;

  // Every thread the server starts inherits this mask, so the signals reach sigwait below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up mid-answer is its own problem

  const std::string dir = o.follow.dir, name = o.model_name;
  auto server = models::Server::Start(std::move(o));
  if (!server.ok()) {
    std::fprintf(stderr, "ferry-serve: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "ferry-serve: serving version %llu of %s on http://%s:%d/v1/models/%s\n",
               static_cast<unsigned long long>((*server)->follower().Current()->version),
               dir.c_str(), address->host.c_str(), (*server)->port(), name.c_str());
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "ferry-serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  (*server)->Stop();
  return 0;
}

}  // namespace ferry::serve
