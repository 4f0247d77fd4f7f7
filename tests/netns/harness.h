// Shared pieces of the netns reliability tests: result lines, the per-test watchdog, a session
// (this process in namespace A, a ferry_test_peer in namespace B) and the traffic loop that moves
// pattern-checked bytes while a fault is injected.
//
// Result lines (one per scenario and backend; collected by scripts/reliability-report.sh):
//   RELIABILITY scenario=loss10 backend=tcp outcome=completed ops=48 errors=0 bytes=8388608
//     detect_ms=- drain_ms=- elapsed_ms=2210 proxy_bytes=- note=- error=-
// `error` is last and runs to the end of the line. They go to stdout and, when
// $FERRY_RELIABILITY_RESULTS names a file, are appended to it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tests/common/backends.h"
#include "tests/common/pattern.h"
#include "tests/common/peer.h"
#include "tests/netns/netns.h"
#include "tests/netns/proxy.h"
#include "transport/transport.h"

namespace ferry::netns {

using Clock = std::chrono::steady_clock;

// Bounds used by every test: the configured peer_timeout and the slack allowed on top of it.
constexpr Millis kPeerTimeout{2000};
constexpr Millis kSlack{3000};

struct Outcome {
  std::string scenario;
  std::string backend;
  // completed | failed-in-bound | hang | late | corrupt | unclear-error | undetected | setup
  std::string outcome;
  uint64_t ops = 0;
  uint64_t errors = 0;
  uint64_t bytes = 0;
  int64_t detect_ms = -1;
  int64_t drain_ms = -1;
  int64_t elapsed_ms = 0;
  int64_t proxy_bytes = -1;
  std::string note;
  std::string error;
};

void Report(const Outcome& o);
// Names the scenario running now, so that a fatal signal (e.g. a library abort()) still leaves a
// RELIABILITY line with outcome=crash (written by the signal handler). Empty scenario clears it.
// The Watchdog sets it for its lifetime.
void SetRunning(const std::string& scenario, const std::string& backend);
// The backend configurations this suite runs ("tcp", "ucx-tcp"); empty reason when available.
std::string ConfigUnavailable(const testing::BackendConfig& config);
const testing::BackendConfig& ConfigNamed(const std::string& name);

// Hard deadline of one test: if it is still alive after `limit`, prints a RELIABILITY line with
// outcome=hang, removes the namespaces and ends the process (a hung test must not hang CI).
// Also names the running scenario for crash reports (SetRunning) while it lives.
class Watchdog {
 public:
  Watchdog(std::string scenario, std::string backend, std::chrono::seconds limit);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// This process's side of a connection to a ferry_test_peer running in namespace B. Owns, in
// construction order (destroyed in reverse): the namespace entry, the transport, the endpoint,
// the imported key and a local region as large as the peer's.
struct Session {
  std::unique_ptr<NetnsEnter> in_a;
  std::unique_ptr<Transport> transport;
  std::string listen_address;
  std::unique_ptr<FaultProxy> proxy;
  std::unique_ptr<testing::PeerProcess> peer;
  std::shared_ptr<Endpoint> ep;
  std::unique_ptr<RemoteKey> key;
  testing::Buffer local_buf;
  std::unique_ptr<MemoryRegion> local;

  ~Session();
};

struct SessionOptions {
  uint64_t region_bytes = 1 << 20;
  uint64_t peer_seed = 7;
  bool via_proxy = false;
  uint64_t seed = 1;
};

// Enters namespace A, creates the transport, listens on the A address (optionally behind a
// FaultProxy), starts the peer in namespace B and accepts it.
Status OpenSession(const testing::BackendConfig& config, const NetnsPair& pair,
                   const SessionOptions& options, Session* s);

struct TrafficOptions {
  uint64_t chunk = 256 << 10;
  int rounds = 4;          // rounds to run when nothing fails
  int fault_round = -1;    // call `inject` right after posting this round's writes
  std::function<Status()> inject;
  Millis budget{60000};    // hard cap on the whole loop (a hang ends it)
};

struct TrafficResult {
  uint64_t ops = 0;
  uint64_t errors = 0;
  uint64_t bytes = 0;       // moved by successful ops
  uint64_t checked = 0;     // bytes compared against the pattern
  uint64_t corrupt = 0;     // ok reads whose bytes did not match
  int rounds_done = 0;
  bool injected = false;
  bool hung = false;        // budget ran out with ops pending or rounds left
  bool undetected = false;  // after the fault, ops kept completing correctly until the bound
  bool unclear = false;     // an error completion without a message or with an unexpected code
  Clock::time_point inject_at{};
  Clock::time_point first_error{};
  Clock::time_point last_completion{};
  std::string first_error_text;
  std::string inject_error;
  std::string corrupt_text;
};

// Rounds of: write the whole peer region from a pattern, then read it back and check it byte for
// byte. Stops posting at the first error and drains what is in flight.
TrafficResult RunTraffic(Session& s, const TrafficOptions& options, uint64_t seed);

int64_t MsBetween(Clock::time_point a, Clock::time_point b);

}  // namespace ferry::netns
