#include "tests/netns/harness.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/common/reliability.h"

namespace ferry::netns {
namespace {

std::string Field(int64_t v) {
  return v < 0 ? "-" : std::to_string(v);
}

void WriteLine(const std::string& line) {
  ferry::testing::WriteReliabilityLine(line);
}

std::string OneLine(std::string s) {
  return ferry::testing::ReliabilityText(std::move(s));
}

}  // namespace

int64_t MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

void Report(const Outcome& o) {
  WriteLine("RELIABILITY scenario=" + o.scenario + " backend=" + o.backend +
            " outcome=" + o.outcome + " ops=" + std::to_string(o.ops) +
            " errors=" + std::to_string(o.errors) + " bytes=" + std::to_string(o.bytes) +
            " detect_ms=" + Field(o.detect_ms) + " drain_ms=" + Field(o.drain_ms) +
            " elapsed_ms=" + Field(o.elapsed_ms) + " proxy_bytes=" + Field(o.proxy_bytes) +
            " note=" + OneLine(o.note.empty() ? "-" : o.note) + " error=" + OneLine(o.error) +
            "\n");
}

const testing::BackendConfig& ConfigNamed(const std::string& name) {
  for (const testing::BackendConfig& c : testing::AllConfigs()) {
    if (c.name == name) return c;
  }
  static const testing::BackendConfig kNone{"(unknown)", "(unknown)", {}, false};
  return kNone;
}

std::string ConfigUnavailable(const testing::BackendConfig& config) {
  if (config.name == "(unknown)") return "configuration unknown to tests/common/backends.cc";
  for (const BackendInfo& b : ListBackends()) {
    if (b.name != config.backend) continue;
    return b.available ? "" : "backend '" + b.name + "' unavailable: " + b.reason;
  }
  return "backend '" + config.backend + "' not compiled in";
}

// ---- Watchdog --------------------------------------------------------------------------------

void SetRunning(const std::string& scenario, const std::string& backend) {
  if (scenario.empty()) {
    SetCrashLine("");
    return;
  }
  SetCrashLine("RELIABILITY scenario=" + scenario + " backend=" + backend +
               " outcome=crash ops=- errors=- bytes=- detect_ms=- drain_ms=- elapsed_ms=- "
               "proxy_bytes=- note=- error=the survivor process died of a fatal signal (library "
               "abort or crash; see the test log for the backtrace)\n");
}

Watchdog::Watchdog(std::string scenario, std::string backend, std::chrono::seconds limit) {
  SetRunning(scenario, backend);
  thread_ = std::thread([this, scenario = std::move(scenario), backend = std::move(backend),
                         limit] {
    std::unique_lock<std::mutex> lk(mu_);
    if (cv_.wait_for(lk, limit, [this] { return done_; })) return;
    Outcome o;
    o.scenario = scenario;
    o.backend = backend;
    o.outcome = "hang";
    o.elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(limit).count();
    o.error = "test exceeded its hard deadline of " + std::to_string(limit.count()) + " s";
    Report(o);
    std::fprintf(stderr, "netns watchdog: %s/%s hung for %lld s; removing namespaces, exiting\n",
                 scenario.c_str(), backend.c_str(), static_cast<long long>(limit.count()));
    EmergencyCleanup();
    _exit(3);
  });
}

Watchdog::~Watchdog() {
  SetRunning("", "");
  {
    std::lock_guard<std::mutex> lk(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

// ---- Session ---------------------------------------------------------------------------------

Session::~Session() {
  key.reset();
  local.reset();
  if (ep) ep->Close();
  ep.reset();
  transport.reset();
  peer.reset();  // SIGKILL + reap
  proxy.reset();
  in_a.reset();
}

Status OpenSession(const testing::BackendConfig& config, const NetnsPair& pair,
                   const SessionOptions& options, Session* s) {
  FERRY_ASSIGN_OR_RETURN(s->in_a, NetnsEnter::Enter(pair.fd_a()));
  TransportOptions topts = config.Options();
  topts.peer_timeout = kPeerTimeout;
  FERRY_ASSIGN_OR_RETURN(s->transport, CreateTransport(config.backend, topts));
  FERRY_ASSIGN_OR_RETURN(s->listen_address, s->transport->Listen(pair.addr(Side::kA) + ":0"));
  std::string connect = s->listen_address;
  if (options.via_proxy) {
    FERRY_ASSIGN_OR_RETURN(s->proxy,
                           FaultProxy::Start(pair.addr(Side::kA), s->listen_address, options.seed));
    connect = s->proxy->address();
  }
  testing::PeerOptions po;
  po.connect = connect;
  po.region_bytes = options.region_bytes;
  po.seed = options.peer_seed;
  po.peer_timeout = kPeerTimeout;
  po.mode = "serve";
  po.lifetime = Millis(90000);
  FERRY_ASSIGN_OR_RETURN(
      s->peer, testing::PeerProcess::Spawn(pair.ExecIn(Side::kB, PeerCommandLine(config, po))));
  auto ep = s->transport->Accept(Millis(20000));
  if (!ep.ok()) {
    const bool running = s->peer->Running();
    return ep.status().Annotate("accept the peer in " + pair.ns(Side::kB) + " (peer " +
                                (running ? "running" : s->peer->exit_description()) + ")");
  }
  s->ep = std::move(*ep);
  if (s->ep->peer_regions().empty()) return Internal("the peer advertised no region");
  FERRY_ASSIGN_OR_RETURN(s->key, s->ep->Import(s->ep->peer_regions().front()));
  s->local_buf = testing::Buffer(options.region_bytes);
  FERRY_ASSIGN_OR_RETURN(s->local, s->transport->RegisterMemory(s->local_buf.data(),
                                                                s->local_buf.size(), kAccessLocal));
  return Status::Ok();
}

// ---- Traffic ---------------------------------------------------------------------------------

TrafficResult RunTraffic(Session& s, const TrafficOptions& o, uint64_t seed) {
  TrafficResult r;
  Transport& t = *s.transport;
  const uint64_t size = std::min<uint64_t>(s.local->size(), s.key->region().length);
  const uint64_t chunk = std::min(o.chunk, size);
  const uint64_t nchunks = (size + chunk - 1) / chunk;
  const auto start = Clock::now();
  const auto hard_end = start + o.budget;
  auto bound_end = hard_end;  // tightened to inject_at + peer_timeout + slack once injected

  std::vector<Completion> done(64);
  bool failed = false;
  uint64_t pending = 0;
  uint64_t next_context = 1;

  auto account = [&](const Completion& c, bool is_read, uint64_t round_seed, uint64_t offset) {
    r.last_completion = Clock::now();
    --pending;
    if (c.ok()) {
      r.bytes += c.bytes;
      if (is_read) {
        auto check = testing::CheckPattern(s.local_buf.data() + offset,
                                           std::min(chunk, size - offset), round_seed, offset);
        r.checked += std::min(chunk, size - offset);
        if (!check) {
          ++r.corrupt;
          if (r.corrupt_text.empty()) r.corrupt_text = check.message();
        }
      }
      return;
    }
    ++r.errors;
    if (!failed) {
      failed = true;
      r.first_error = r.last_completion;
      r.first_error_text = std::string(CodeName(c.code)) + ": " + c.error;
    }
    const bool expected_code = c.code == Code::kPeerFailure || c.code == Code::kTimeout ||
                               c.code == Code::kIoError || c.code == Code::kCancelled;
    if (c.error.empty() || !expected_code) r.unclear = true;
  };

  // One phase: post every chunk of the region as `type`, then reap until all completed.
  auto phase = [&](OpType type, uint64_t round_seed, bool inject_now) {
    std::vector<Op> ops;
    std::vector<uint64_t> offsets;
    for (uint64_t i = 0; i < nchunks; ++i) {
      Op op;
      op.type = type;
      op.ep = s.ep.get();
      op.context = next_context++;
      op.local = s.local.get();
      op.local_offset = i * chunk;
      op.length = std::min(chunk, size - i * chunk);
      op.remote = s.key.get();
      op.remote_offset = i * chunk;
      ops.push_back(op);
      offsets.push_back(i * chunk);
    }
    const uint64_t first_context = ops.front().context;
    Status posted = t.Post(ops);
    r.ops += ops.size();
    if (!posted.ok()) {
      r.errors += ops.size();
      if (!failed) {
        failed = true;
        r.first_error = Clock::now();
        r.first_error_text = "Post: " + posted.ToString();
      }
      return;
    }
    pending += ops.size();
    if (inject_now && o.inject) {
      r.inject_at = Clock::now();
      Status st = o.inject();
      r.injected = true;
      if (!st.ok()) r.inject_error = st.ToString();
      bound_end = std::min(hard_end, r.inject_at + kPeerTimeout + kSlack);
    }
    // Ops posted before the fault must be done by inject_at + bound; ops posted later get the
    // full bound from their own posting (an op that keeps completing is not hung).
    const auto phase_end =
        std::min(hard_end, std::max(bound_end, Clock::now() + kPeerTimeout + kSlack));
    while (pending > 0) {
      if (Clock::now() > phase_end) {
        r.hung = true;  // ops still pending at the bound: a hang
        return;
      }
      size_t n = t.Poll(done);
      for (size_t i = 0; i < n; ++i) {
        const Completion& c = done[i];
        if (c.context < first_context || c.context >= first_context + ops.size()) continue;
        account(c, type == OpType::kRead, round_seed, offsets[c.context - first_context]);
      }
      if (n == 0) (void)t.Wait(Millis(20));
    }
  };

  for (int round = 0; !failed && !r.hung; ++round) {
    if (!o.inject && round >= o.rounds) break;
    if (Clock::now() > bound_end) {
      // Every op so far completed, but the bound passed without an error (after a fault) or
      // before the rounds were done (without one).
      if (r.injected) {
        r.undetected = true;
      } else {
        r.hung = true;
      }
      break;
    }
    const uint64_t round_seed = seed * 1000 + static_cast<uint64_t>(round);
    testing::FillPattern(s.local_buf.data(), size, round_seed);
    phase(OpType::kWrite, round_seed, o.inject && round == o.fault_round);
    if (failed || r.hung) break;
    std::memset(s.local_buf.data(), 0, size);
    phase(OpType::kRead, round_seed, false);
    if (!failed && !r.hung) ++r.rounds_done;
  }
  return r;
}

}  // namespace ferry::netns
