// The coordinator's state machine (see coordinator.h).
#include "ps/coordinator/coordinator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "ps/coordinator/coordinator_state.h"
#include "ps/job/checkpoint.h"

namespace ferry::ps {

using Clock = std::chrono::steady_clock;

void Coordinator::Impl::CheckApplied() {
  if (applying == 0) return;
  for (size_t s = 0; s < servers.size(); ++s) {
    if (!chain.dead(static_cast<uint32_t>(s)) && server_applied[s] < applying) return;
  }
  min_clock = applying;
  applying = 0;
  // The servers get the checkpoint command before any worker can push for the next clock: their
  // copies hold exactly the clocks < min_clock.
  MaybeStartPeriodicCheckpoint();
  ControlMessage u;
  u.kind = ControlKind::kClockUpdate;
  u.value = min_clock;
  SendToRole(Role::kWorker, u);
  // Replicas: the servers free the forward-ring space of this clock's pushes (every server
  // applied them now).
  if (job.replicas > 1) SendToRole(Role::kServer, u);
  AdvanceClocks();
}

void Coordinator::Impl::ReleaseBarriers() {
  const size_t running = workers.size() - finished;
  for (auto it = barriers.begin(); it != barriers.end();) {
    if (it->second < running) {
      ++it;
      continue;
    }
    ControlMessage r;
    r.kind = ControlKind::kBarrierRelease;
    r.value = it->first;
    SendToRole(Role::kWorker, r);
    it = barriers.erase(it);
  }
}

void Coordinator::Impl::AdvanceClocks() {
  // The slowest worker still running: one that finished never clocks again, and waiting for it
  // would block the others forever (workers may run different numbers of iterations).
  uint64_t lo = UINT64_MAX;
  for (int i : workers) {
    if (!conns[i].finished) lo = std::min(lo, conns[i].clock);
  }
  if (lo == UINT64_MAX || lo <= min_clock) return;
  if (job.consistency.kind == Consistency::kBsp) {
    if (applying != 0) return;  // one clock at a time; the next is checked once this is applied
    applying = min_clock + 1;   // workers wait for each update, so lo == min_clock + 1
    ControlMessage a;
    a.kind = ControlKind::kApplyClock;
    a.value = applying;
    SendToRole(Role::kServer, a);
    return;
  }
  min_clock = lo;
  ControlMessage u;
  u.kind = ControlKind::kClockUpdate;
  u.value = min_clock;
  SendToRole(Role::kWorker, u);
}

void Coordinator::Impl::OnMessage(size_t ci, ControlMessage msg) {
  Member& m = conns[ci];
  if (msg.kind == ControlKind::kRegister) {
    auto reject = [&](const std::string& why) {
      ControlMessage r;
      r.kind = ControlKind::kReject;
      r.text = why;
      Send(m.ep, r);
      std::fprintf(stderr, "ferry coordinator: rejected rank %u: %s\n", msg.rank, why.c_str());
    };
    if (phase == Phase::kFailed) {
      Send(m.ep, failure_notice);
      return;
    }
    if (m.registered) return reject("registered twice");
    if (phase != Phase::kRegistering) return reject("the job has already started");
    if (msg.members.size() != 1) return reject("registration without the member's identity");
    if (msg.value != fingerprint) {
      return reject("rank " + std::to_string(msg.rank) +
                    " runs with a different job specification (tables, consistency, cluster "
                    "shape, transport or sizes differ from rank 0's): start every rank with the "
                    "same program and flags");
    }
    auto& slots = msg.role == Role::kServer ? servers : workers;
    if (msg.index >= slots.size()) {
      return reject(std::string(RoleName(msg.role)) + " index " + std::to_string(msg.index) +
                    " is out of range");
    }
    if (slots[msg.index] >= 0) {
      return reject(std::string(RoleName(msg.role)) + " " + std::to_string(msg.index) +
                    " registered twice (two ranks with the same rank number?)");
    }
    slots[msg.index] = static_cast<int>(ci);
    m.registered = true;
    m.info = msg.members.empty() ? MemberInfo{} : msg.members[0];
    m.info.rank = msg.rank;
    m.info.role = msg.role;
    m.info.index = msg.index;
    if (++registered == servers.size() + workers.size()) {
      ControlMessage mem;
      mem.kind = ControlKind::kMembership;
      for (int i : servers) mem.members.push_back(conns[i].info);
      for (int i : workers) mem.members.push_back(conns[i].info);
      SendToAll(mem);
      phase = Phase::kConnecting;
    }
    return;
  }
  if (msg.kind == ControlKind::kFailure) {
    if (m.removed) return;  // it lost its peers because it was taken out
    if (m.registered && msg.value == ControlClient::kFailureWhileRunning) {
      // A clean shutdown has begun: a member's connections end anyway (see OnGone).
      if (phase == Phase::kFinishing) return;
      // A member lost a peer (a worker its server, a server its worker) and is about to leave:
      // its report names the peer that failed. Without it, the member's own departure could
      // reach us first and the job's failure would name the wrong rank.
      FailJob(nullptr, PeerFailure(Describe(m) + " reports: " + msg.text));
      return;
    }
    // A rank that could not start (registered or not) says why: the job cannot run.
    FailJob(nullptr,
            PeerFailure("rank " + std::to_string(msg.rank) + " failed to start: " + msg.text));
    return;
  }
  if (!m.registered) return;  // ignore anything before registration
  if (m.removed) return;      // a server out of the job: its shards have moved on
  switch (msg.kind) {
    case ControlKind::kSuspect: {
      // A member lost its data connection to a server: the server leaves the job (the chains
      // close over it), or, when a shard would be left without a live replica, the job fails;
      // Judge() decides which server once the accusations of a short window are in.
      const Status why = PeerFailure(Describe(m) + " lost its connection to server " +
                                     std::to_string(msg.index) + ": " + msg.text);
      // Only members of a job with replicas send it, and only while it runs (connections end
      // anyway while it finishes).
      if (msg.index >= servers.size() || servers[msg.index] < 0 || phase != Phase::kRunning) {
        return;
      }
      Accuse(ci, msg.index, why);
      return;
    }
    case ControlKind::kReady:
      if (!m.ready && phase == Phase::kConnecting) {
        m.ready = true;
        if (++ready == servers.size() + workers.size()) {
          ControlMessage s;
          s.kind = ControlKind::kStart;
          SendToAll(s);
          phase = Phase::kRunning;
        }
      }
      return;
    case ControlKind::kBarrier: {
      if (m.info.role != Role::kWorker) return;
      ++barriers[msg.value];
      ReleaseBarriers();
      return;
    }
    case ControlKind::kClock:
      if (m.info.role != Role::kWorker) return;
      if (msg.value > m.clock) {
        m.clock = msg.value;
        m.position = msg.value2;
      }
      AdvanceClocks();
      return;
    case ControlKind::kClockApplied:
      if (m.info.role != Role::kServer || msg.value != applying) return;
      server_applied[m.info.index] = applying;
      CheckApplied();
      return;
    case ControlKind::kGather: {
      if (m.info.role != Role::kWorker || workers.empty()) return;
      const bool to_all = msg.rank == 1;
      msg.kind = ControlKind::kGatherPart;
      msg.rank = m.info.index;
      if (to_all) {
        SendToRole(Role::kWorker, msg);
      } else {
        Send(conns[workers[0]].ep, std::move(msg));
      }
      return;
    }
    case ControlKind::kCheckpoint: {
      if (m.info.role != Role::kWorker) return;
      // Ids are the requester's; two workers asking at once get distinct keys.
      const uint64_t key = (uint64_t{m.info.index} << 40) | (msg.value & ((uint64_t{1} << 40) - 1));
      PendingCheckpoint p;
      p.requester = ci;
      p.dir = msg.text;
      p.clear = msg.value2 == kCheckpointClear;
      checkpoints[key] = std::move(p);
      ControlMessage c;
      c.kind = ControlKind::kCheckpoint;
      c.value = key;
      c.value2 = msg.value2;
      c.text = msg.text;
      SendToRole(Role::kServer, c);
      return;
    }
    case ControlKind::kCheckpointDone: {
      if (m.info.role != Role::kServer) return;
      auto it = checkpoints.find(msg.value);
      if (it == checkpoints.end()) return;
      PendingCheckpoint& p = it->second;
      if (!msg.text.empty() && p.error.empty()) {
        p.error = "server " + std::to_string(m.info.index) + ": " + msg.text;
      }
      p.answered.insert(m.info.index);
      CheckCheckpoints();
      return;
    }
    case ControlKind::kFinish:
      if (m.info.role != Role::kWorker || m.finished) return;
      m.finished = true;
      // The others no longer wait for this worker's clock, nor for it at a barrier (it waited
      // for its own requests before finishing: its pushes are in).
      ++finished;
      AdvanceClocks();
      ReleaseBarriers();
      if (finished == workers.size() && phase == Phase::kRunning) {
        ControlMessage s;
        s.kind = ControlKind::kShutdown;
        s.text = "every worker finished";
        SendToAll(s);
        phase = Phase::kFinishing;
        finish_deadline = Clock::now() + std::max(job.peer_timeout * 2, Millis(5000));
      }
      return;
    default:
      return;  // messages only the coordinator sends
  }
}

void Coordinator::Impl::Run() {
  const auto startup_deadline = Clock::now() + job.startup_timeout;
  Completion comps[32];
  while (!stop) {
    // New connections: those whose handshake completed in an earlier Poll or Wait.
    auto accept_new = [&] {
      while (true) {
        auto ep = t->Accept(Millis(0));
        if (!ep.ok()) break;
        by_ep[(*ep)->id()] = conns.size();
        Member nm;
        nm.ep = std::move(ep).value();
        conns.push_back(std::move(nm));
      }
    };
    accept_new();
    const size_t n = t->Poll(comps);
    for (size_t i = 0; i < n; ++i) {
      const Completion& c = comps[i];
      if (!mailbox->Owns(c)) continue;
      auto r = mailbox->Handle(c);
      auto it = c.ep != nullptr ? by_ep.find(c.ep->id()) : by_ep.end();
      if (c.ep != nullptr && it == by_ep.end()) {
        // The handshake completed in this very Poll and the peer's first message (kRegister)
        // arrived right behind it: the endpoint is still waiting in Accept's queue. Dropping
        // the message here left that member "never registered" until the startup timeout.
        accept_new();
        it = by_ep.find(c.ep->id());
      }
      if (!r.ok()) {
        if (it != by_ep.end()) {
          // A malformed message closes that member only (and fails the job if it mattered).
          conns[it->second].ep->Close();
          OnGone(it->second, r.status());
        }
        continue;
      }
      if (r->has_value() && it != by_ep.end()) OnMessage(it->second, std::move(**r));
    }
    for (size_t ci = 0; ci < conns.size(); ++ci) {
      if (!conns[ci].gone && !conns[ci].ep->status().ok()) OnGone(ci, conns[ci].ep->status());
    }
    Flush();
    const auto now = Clock::now();
    if (phase == Phase::kRegistering || phase == Phase::kConnecting) {
      if (now > startup_deadline) {
        std::string missing;
        for (size_t s = 0; s < servers.size(); ++s) {
          const int i = servers[s];
          if (i < 0 || (phase == Phase::kConnecting && !conns[i].ready)) {
            missing += (missing.empty() ? "" : ", ") + std::string("server ") + std::to_string(s);
          }
        }
        for (size_t w = 0; w < workers.size(); ++w) {
          const int i = workers[w];
          if (i < 0 || (phase == Phase::kConnecting && !conns[i].ready)) {
            missing += (missing.empty() ? "" : ", ") + std::string("worker ") + std::to_string(w);
          }
        }
        FailJob(nullptr, Timeout(std::string(phase == Phase::kRegistering ? "never registered"
                                                                          : "never became ready") +
                                 " within the startup timeout (" +
                                 std::to_string(job.startup_timeout.count()) + " ms): " + missing));
      }
    }
    if (phase == Phase::kFinishing) {
      const bool all_gone = std::all_of(conns.begin(), conns.end(),
                                        [](const Member& m) { return m.gone || !m.registered; });
      if ((all_gone && outbox.empty()) || now > finish_deadline) phase = Phase::kDone;
    }
    if (phase == Phase::kFailed) {
      // Members still starting would wait for the startup timeout: stay a little longer to
      // answer their registration with the failure. Then let the notices leave, and end.
      const bool waiting = registered < servers.size() + workers.size();
      if (!waiting || now > failed_at + std::min(job.startup_timeout, Millis(3000))) {
        DrainSends(now + Millis(1000));
        break;
      }
    }
    if (phase == Phase::kDone) {
      DrainSends(now + Millis(1000));
      break;
    }
    if (judge_at != Clock::time_point() && Clock::now() >= judge_at) Judge();
    Millis wait(phase == Phase::kRunning ? 50 : 5);
    if (judge_at != Clock::time_point()) {
      wait =
          std::clamp(std::chrono::duration_cast<Millis>(judge_at - Clock::now()), Millis(1), wait);
    }
    if (n == 0) (void)t->Wait(wait);
  }
  std::lock_guard<std::mutex> lock(mu);
  ended = true;
}

Coordinator::Coordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Coordinator::~Coordinator() {
  impl_->stop = true;
  if (impl_->t) impl_->t->Wake();
  if (impl_->thread.joinable()) impl_->thread.join();
  for (auto& m : impl_->conns) m.ep->Close();
  impl_->conns.clear();
  impl_->mailbox.reset();
  impl_->t.reset();
}

Result<std::unique_ptr<Coordinator>> Coordinator::Start(const JobSpec& job,
                                                        const std::string& bind_address) {
  FERRY_RETURN_IF_ERROR(ValidateJob(job));
  auto impl = std::make_unique<Impl>();
  impl->job = job;
  impl->fingerprint = job.Fingerprint();
  impl->servers.assign(job.servers, -1);
  impl->workers.assign(job.workers, -1);
  impl->chain = ChainMap(job.servers, job.replicas);
  impl->server_applied.assign(job.servers, 0);
  if (!job.restore_dir.empty()) {
    // A restored job goes on from the checkpoint's clock (the workers start there too).
    FERRY_ASSIGN_OR_RETURN(CheckpointManifest m, ReadManifest(job.restore_dir));
    impl->min_clock = m.clock;
  }
  TransportOptions o = ControlTransportOptions(job);
  o.max_endpoints = job.servers + job.workers + 64;
  FERRY_ASSIGN_OR_RETURN(impl->t, CreateTransport("tcp", o));
  FERRY_ASSIGN_OR_RETURN(impl->mailbox,
                         ControlMailbox::Create(impl->t.get(), 16 + job.servers + job.workers));
  FERRY_RETURN_IF_ERROR(impl->mailbox->PostReceives());
  auto addr = impl->t->Listen(bind_address);
  if (!addr.ok()) return addr.status().Annotate("coordinator: listen on " + bind_address);
  impl->address = *addr;
  Impl* raw = impl.get();
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(impl)));
  raw->thread = std::thread([raw] { raw->Run(); });
  return c;
}

const std::string& Coordinator::address() const {
  return impl_->address;
}

Status Coordinator::Join() {
  if (impl_->thread.joinable()) impl_->thread.join();
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->result;
}

}  // namespace ferry::ps
