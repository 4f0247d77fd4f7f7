// Shared machinery of the conformance suite: the parameterised fixture, a connected pair of
// transports with registered regions, a completion collector that drives progress on every
// transport a case uses, and op builders.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/common/backends.h"
#include "tests/common/ops.h"
#include "tests/common/pattern.h"
#include "tests/common/print.h"
#include "tests/common/status_asserts.h"
#include "tests/common/tally.h"
#include "transport/fault/fault.h"
#include "transport/transport.h"

namespace ferry::testing {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Generous bounds: the machine is noisy, and none of these is a performance assertion.
inline constexpr Millis kConnectTimeout{20000};
inline constexpr Millis kOpTimeout{60000};

// StatusText, ASSERT_OK and ASSERT_OK_AND_ASSIGN: tests/common/status_asserts.h.

// Creates a transport of `config`, with config.params merged over options.params; for a "fault+"
// configuration, wrapped in a FaultTransport with a clean plan.
Result<std::unique_ptr<Transport>> MakeTransport(const BackendConfig& config,
                                                 TransportOptions options);
// The FaultTransport `t` is (made by MakeTransport for a "fault+" configuration), or nullptr.
FaultTransport* FaultOf(Transport* t);

struct Connection {
  std::shared_ptr<Endpoint> client;  // on the connecting transport
  std::shared_ptr<Endpoint> server;  // on the accepting transport
};

// Connects `client` to `server` (already listening at `address`): Connect on the calling thread,
// Accept on a helper thread, as two processes would.
Result<Connection> ConnectPair(Transport& client, Transport& server, const std::string& address,
                               Millis timeout = kConnectTimeout);

// Collects completions per transport while driving progress on a set of transports.
class Poller {
 public:
  explicit Poller(std::vector<Transport*> driven) : driven_(std::move(driven)) {}

  // Polls every driven transport (and `extra`, if not null) once; returns completions found.
  size_t Drive(Transport* extra = nullptr);
  // Drives for `d`, collecting everything.
  void DriveFor(Millis d);
  // Waits for the completion of the op posted with `context` on `t` (never a kNotify).
  ::testing::AssertionResult Await(Transport* t, uint64_t context, Completion* out,
                                   Millis timeout = kOpTimeout);
  // Waits for the next kNotify completion on `t`.
  ::testing::AssertionResult AwaitNotify(Transport* t, Completion* out,
                                         Millis timeout = kOpTimeout);
  // Completions collected on `t` and not yet taken.
  std::deque<Completion>& queue(Transport* t) { return queues_[t]; }

 private:
  void Idle(Transport* extra);
  std::vector<Transport*> driven_;
  std::map<Transport*, std::deque<Completion>> queues_;
  int idle_rounds_ = 0;
};

// Op builders: SendOp, RecvOp, WriteOp, ReadOp, SparseOp (tests/common/ops.h).

// Registrations start this many bytes into their buffer, so that no region is page aligned.
inline constexpr size_t kMisalign = 5;

struct PairOptions {
  uint64_t a_bytes = 1 << 20;
  uint64_t b_bytes = 1 << 20;
  uint32_t b_access = kAccessRemote;
  bool b_progress_thread = false;  // the target drives itself; the case polls only A
  TransportOptions a_options;      // params from the configuration are merged in
  TransportOptions b_options;
};

// A (initiator, client) connected to B (target, server). A's region is imported on B's endpoint
// as a_key and B's region on A's endpoint as b_key (both via the handshake's advertised regions).
// Members are declared in construction order; destruction runs in reverse, which is the order
// the transport contract requires (keys and endpoints, then regions, then transports, then the
// memory itself).
struct Pair {
  Buffer a_buf, b_buf;
  std::unique_ptr<Transport> a, b;
  std::unique_ptr<MemoryRegion> a_mr, b_mr;
  std::string address;
  Connection conn;
  std::unique_ptr<RemoteKey> b_key, a_key;

  Endpoint* a_ep() const { return conn.client.get(); }
  Endpoint* b_ep() const { return conn.server.get(); }
  uint8_t* a_mem() const { return a_mr->data(); }
  uint8_t* b_mem() const { return b_mr->data(); }
};

class Conformance : public ::testing::TestWithParam<BackendConfig> {
 protected:
  void SetUp() override { SetCurrentConfig(GetParam().name); }
  const BackendConfig& config() const { return GetParam(); }

  // Builds and connects a Pair (use with ASSERT_NO_FATAL_FAILURE).
  void MakePair(Pair* p, const PairOptions& o = PairOptions());
  // The poller a case over `p` should use: both sides, or only A when B has a progress thread.
  static Poller PollerFor(const Pair& p, bool b_progress_thread = false) {
    return b_progress_thread ? Poller({p.a.get()}) : Poller({p.a.get(), p.b.get()});
  }
};

#define FERRY_REQUIRE_CAP(caps, flag)                                   \
  do {                                                                  \
    if (!(caps).flag) GTEST_SKIP() << config().name << " lacks " #flag; \
  } while (0)

}  // namespace ferry::testing
