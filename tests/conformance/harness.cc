#include "tests/conformance/harness.h"

#include <atomic>
#include <future>
#include <sstream>
#include <thread>

namespace ferry::testing {

Result<std::unique_ptr<Transport>> MakeTransport(const BackendConfig& config,
                                                 TransportOptions options) {
  for (const auto& [k, v] : config.params) options.params[k] = v;
  if (config.single_threaded) options.thread_mode = ThreadMode::kSingle;
  auto t = CreateTransport(config.backend, options);
  if (!t.ok() || !config.fault_wrapped) return t;
  // A clean plan: the wrapper must be invisible until a case sets one (FaultOf()).
  return std::unique_ptr<Transport>(std::make_unique<FaultTransport>(std::move(*t), FaultPlan{}));
}

FaultTransport* FaultOf(Transport* t) {
  return dynamic_cast<FaultTransport*>(t);
}

Result<Connection> ConnectPair(Transport& client, Transport& server, const std::string& address,
                               Millis timeout) {
  // Accept in short slices so that a failed Connect does not leave us waiting out the full
  // timeout on the accepting side.
  std::atomic<bool> give_up{false};
  auto accepted = std::async(std::launch::async, [&server, &give_up, timeout] {
    const auto end = Clock::now() + timeout;
    while (true) {
      Result<std::shared_ptr<Endpoint>> ep = server.Accept(Millis(250));
      if (ep.ok() || ep.status().code() != Code::kTimeout || give_up.load() || Clock::now() > end) {
        return ep;
      }
    }
  });
  Result<std::shared_ptr<Endpoint>> connected = client.Connect(address, timeout);
  if (!connected.ok()) give_up = true;
  Result<std::shared_ptr<Endpoint>> server_ep = accepted.get();
  if (!connected.ok()) return connected.status().Annotate("Connect " + address);
  if (!server_ep.ok()) return server_ep.status().Annotate("Accept on " + address);
  return Connection{std::move(connected).value(), std::move(server_ep).value()};
}

size_t Poller::Drive(Transport* extra) {
  Completion buf[64];
  size_t total = 0;
  auto poll = [&](Transport* t) {
    size_t n = t->Poll(buf);
    for (size_t i = 0; i < n; ++i) queues_[t].push_back(std::move(buf[i]));
    total += n;
  };
  for (Transport* t : driven_) poll(t);
  if (extra != nullptr && std::find(driven_.begin(), driven_.end(), extra) == driven_.end()) {
    poll(extra);
  }
  return total;
}

// After a stretch of empty polls, block briefly in Wait() (which drives progress too) instead of
// spinning: on a 2-core machine a spinning test starves progress threads and peer processes.
void Poller::Idle(Transport* extra) {
  if (++idle_rounds_ < 256) return;
  idle_rounds_ = 0;
  std::vector<Transport*> all = driven_;
  if (extra != nullptr && std::find(all.begin(), all.end(), extra) == all.end()) {
    all.push_back(extra);
  }
  for (Transport* t : all) (void)t->Wait(Millis(1));
}

void Poller::DriveFor(Millis d) {
  const auto end = Clock::now() + d;
  while (Clock::now() < end) {
    if (Drive() == 0) Idle(nullptr);
  }
}

namespace {

std::string Describe(const Completion& c) {
  std::ostringstream m;
  m << OpTypeName(c.type) << " ctx=" << c.context << " " << CodeName(c.code);
  if (!c.error.empty()) m << " (" << c.error << ")";
  return m.str();
}

}  // namespace

::testing::AssertionResult Poller::Await(Transport* t, uint64_t context, Completion* out,
                                         Millis timeout) {
  const auto end = Clock::now() + timeout;
  while (true) {
    std::deque<Completion>& q = queues_[t];
    for (auto it = q.begin(); it != q.end(); ++it) {
      if (it->type != OpType::kNotify && it->context == context) {
        *out = std::move(*it);
        q.erase(it);
        return ::testing::AssertionSuccess();
      }
    }
    if (Clock::now() > end) break;
    if (Drive(t) == 0) Idle(t);
  }
  std::ostringstream m;
  m << "no completion for context " << context << " on " << t->name() << " after "
    << timeout.count() << " ms; collected meanwhile:";
  for (const Completion& c : queues_[t]) m << " [" << Describe(c) << "]";
  return ::testing::AssertionFailure() << m.str();
}

::testing::AssertionResult Poller::AwaitNotify(Transport* t, Completion* out, Millis timeout) {
  const auto end = Clock::now() + timeout;
  while (true) {
    std::deque<Completion>& q = queues_[t];
    for (auto it = q.begin(); it != q.end(); ++it) {
      if (it->type == OpType::kNotify) {
        *out = std::move(*it);
        q.erase(it);
        return ::testing::AssertionSuccess();
      }
    }
    if (Clock::now() > end) break;
    if (Drive(t) == 0) Idle(t);
  }
  return ::testing::AssertionFailure()
         << "no kNotify completion on " << t->name() << " after " << timeout.count() << " ms";
}

void Conformance::MakePair(Pair* p, const PairOptions& o) {
  TransportOptions bo = o.b_options;
  bo.progress_thread = bo.progress_thread || o.b_progress_thread;
  ASSERT_OK_AND_ASSIGN(p->a, MakeTransport(config(), o.a_options));
  ASSERT_OK_AND_ASSIGN(p->b, MakeTransport(config(), bo));
  p->a_buf = Buffer(o.a_bytes + kMisalign);
  p->b_buf = Buffer(o.b_bytes + kMisalign);
  ASSERT_OK_AND_ASSIGN(p->a_mr,
                       p->a->RegisterMemory(p->a_buf.data() + kMisalign, o.a_bytes, kAccessRemote));
  ASSERT_OK_AND_ASSIGN(p->b_mr,
                       p->b->RegisterMemory(p->b_buf.data() + kMisalign, o.b_bytes, o.b_access));
  p->a->Advertise({p->a_mr->descriptor()});
  p->b->Advertise({p->b_mr->descriptor()});
  ASSERT_OK_AND_ASSIGN(p->address, p->b->Listen("127.0.0.1:0"));
  ASSERT_OK_AND_ASSIGN(p->conn, ConnectPair(*p->a, *p->b, p->address));
  ASSERT_EQ(p->a_ep()->peer_regions().size(), 1u);
  ASSERT_EQ(p->b_ep()->peer_regions().size(), 1u);
  ASSERT_OK_AND_ASSIGN(p->b_key, p->a_ep()->Import(p->a_ep()->peer_regions()[0]));
  ASSERT_OK_AND_ASSIGN(p->a_key, p->b_ep()->Import(p->b_ep()->peer_regions()[0]));
}

}  // namespace ferry::testing
