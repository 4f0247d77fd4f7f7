// The library's own floor for perf/serving/run.sh: cpp-httplib (the same Debian build as
// ferry-serve) with one handler, POST /v1/models/NAME:predict, answering a constant of the size of
// a 1-instance prediction, with ferry-serve's pool, timeouts and keep-alive cap. The body is read
// (the library does that before the handler) and ignored.
//
//   serve_floor [--listen HOST:PORT] [--threads N] [--tcp-nodelay]
// Port 0: any free port, printed on stdout. --tcp-nodelay sets TCP_NODELAY on its connections
// (cpp-httplib leaves Nagle on unless asked): the header and the body of an answer go out as
// separate writes, and with Nagle the second waits for the client's delayed ACK (40 ms on Linux).
#include <httplib.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {
httplib::Server* g_server = nullptr;
void Stop(int) {
  if (g_server != nullptr) g_server->stop();
}
}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:0";
  int threads = 8;
  bool nodelay = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--listen") == 0 && i + 1 < argc) {
      listen = argv[++i];
    } else if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--tcp-nodelay") == 0) {
      nodelay = true;
    } else {
      std::fprintf(stderr,
                   "usage: serve_floor [--listen HOST:PORT] [--threads N] [--tcp-nodelay]\n");
      return 2;
    }
  }
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || threads < 1) {
    std::fprintf(stderr, "serve_floor: bad --listen or --threads\n");
    return 2;
  }
  const std::string host = listen.substr(0, colon);
  const int port = std::atoi(listen.c_str() + colon + 1);

  httplib::Server server;
  // ferry-serve's settings (models/serve/server.cc): its pool, its timeouts and keep-alive cap.
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server.set_payload_max_length(64u << 20);
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.set_keep_alive_timeout(5);
  server.set_keep_alive_max_count(1000);
  server.set_tcp_nodelay(nodelay);
  server.Post(R"(/v1/models/[^/]+:predict)", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"predictions":[0.2376415],"model_version":1})", "application/json");
  });
  g_server = &server;
  std::signal(SIGINT, Stop);
  std::signal(SIGTERM, Stop);
  const int bound =
      port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    std::fprintf(stderr, "serve_floor: cannot bind %s\n", listen.c_str());
    return 1;
  }
  std::printf("serve_floor listening on http://%s:%d/v1/models/\n", host.c_str(), bound);
  std::fflush(stdout);
  return server.listen_after_bind() ? 0 : 1;
}
