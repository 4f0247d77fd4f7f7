// Running a benchmark: the client side (owns the configuration, prints results) and the server
// side (serves one client session, like perftest's and ucx_perftest's servers).
//
// Usage:
//   auto server = BenchServer::Listen(peer, "127.0.0.1:0");      // learn server->address()
//   std::thread t([&] { Status s = (*server)->Serve(Millis(10000)); });
//   Result<Report> r = RunClient(peer, config, (*server)->address(), callbacks);
//
// Protocol (control endpoint, JSON messages; every side always has one control receive posted
// before the peer can send, so no message is ever unexpected):
//   client connects (config in the handshake's hello_info)   server: hello{regions}
//   client: regions{regions}
//   per size k: client connects the data endpoints; client: prepared{k}; server: go{k};
//               ... measurement ...; client: done{k, counts}; server: verdict{k, counts, bw};
//               client: end{k} (its workers are done too); both close the data endpoints and
//               reap what was still posted.
//   client: bye.   Either side may send abort{error} at any point; the peer then fails with it.
//
// Blocking: both calls block for the whole run; every wait is bounded by config.timeout_ms (no
// progress) so a dead peer is an error, never a hang. Thread-safety: independent calls may run
// concurrently (one Transport each).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "tools/bench/config.h"
#include "tools/bench/report.h"
#include "transport/status.h"
#include "transport/transport.h"

namespace ferry::bench {

struct PeerOptions {
  std::string transport = "tcp";
  std::map<std::string, std::string> params;  // TransportOptions::params
  bool progress_thread = false;               // TransportOptions::progress_thread
  // TransportOptions::thread_mode. kSingle is safe with one worker thread: during a phase the
  // worker is then the transport's only caller (the main thread's control traffic goes through
  // it), as ucx_perftest runs its worker UCS_THREAD_MODE_SINGLE by default.
  ThreadMode thread_mode = ThreadMode::kMulti;
  Millis connect_timeout{10000};
};

struct RunCallbacks {
  std::function<void(const RunHeader&)> on_header;
  std::function<void(const RunHeader&, const LatencyRow&)> on_latency;
  std::function<void(const RunHeader&, const BandwidthRow&)> on_bandwidth;
};

// Checks that `caps` can run `config` (ops, sizes, segment counts), with a clear message.
Status CheckSupport(const BenchConfig& config, const Capabilities& caps,
                    const std::string& transport);

// Runs every size of `config` against the server at `address`; rows are reported through the
// callbacks as they complete and returned in the Report.
Result<Report> RunClient(const PeerOptions& peer, const BenchConfig& config,
                         const std::string& address, const RunCallbacks& callbacks = {});

class BenchServer {
 public:
  // Creates the transport and listens on `bind` ("host:port"; port 0 picks one).
  static Result<std::unique_ptr<BenchServer>> Listen(const PeerOptions& peer,
                                                     const std::string& bind);
  ~BenchServer();
  BenchServer(const BenchServer&) = delete;
  BenchServer& operator=(const BenchServer&) = delete;

  const std::string& address() const { return address_; }
  // Serves one client session (waits up to `accept_timeout` for it to connect). Call once.
  Status Serve(Millis accept_timeout);
  // The configuration the last client asked for (valid after Serve got that far).
  const BenchConfig& config() const { return config_; }

 private:
  BenchServer() = default;
  PeerOptions peer_;
  std::unique_ptr<Transport> transport_;
  std::string address_;
  BenchConfig config_;
};

}  // namespace ferry::bench
