// The coordinator's state machine (see coordinator.h).
#include "ps/coordinator.h"

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

#include "ps/chain.h"
#include "ps/checkpoint.h"
#include "ps/control.h"

namespace ferry::ps {

using Clock = std::chrono::steady_clock;

struct Coordinator::Impl {
  struct Member {
    std::shared_ptr<Endpoint> ep;
    bool registered = false;
    MemberInfo info;
    bool ready = false;
    bool finished = false;  // worker sent kFinish
    bool gone = false;      // connection closed or failed
    bool removed = false;   // a server taken out of the job (replicas: kServerDown)
    uint64_t clock = 0;     // workers: completed clocks
    uint64_t position = 0;  // workers: the data position reported with that clock
  };

  JobSpec job;
  uint64_t fingerprint = 0;
  std::unique_ptr<Transport> t;
  std::unique_ptr<ControlMailbox> mailbox;
  std::string address;
  Clock::time_point start = Clock::now();

  std::vector<Member> conns;                   // every accepted connection
  std::unordered_map<uint64_t, size_t> by_ep;  // endpoint id -> conns index
  std::vector<int> servers, workers;           // role index -> conns index (-1: none yet)
  size_t registered = 0, ready = 0, finished = 0;
  enum class Phase {
    kRegistering,
    kConnecting,
    kRunning,
    kFinishing,
    kDone,
    kFailed
  } phase = Phase::kRegistering;
  std::map<uint64_t, size_t> barriers;  // id -> workers entered
  uint64_t min_clock = 0;
  ChainMap chain;                                // which servers are dead (replicas > 1)
  std::map<uint32_t, std::set<size_t>> accused;  // server -> conns indices of its accusers
  std::map<uint32_t, Status> accused_why;        // server -> the first accusation
  Clock::time_point judge_at{};                  // when the pending accusations are weighed
  static constexpr Millis kJudgeWindow{250};
  std::vector<uint64_t> server_applied;  // BSP: the last clock each server applied
  struct PendingCheckpoint {
    size_t requester = 0;  // conns index of the worker that asked; kPeriodic: none
    std::string dir;
    std::set<uint32_t> answered;  // servers that wrote their shards (or failed to)
    std::string error;
    bool lost_server = false;         // a server was removed meanwhile: its shards may be missing
    uint64_t clock = 0;               // periodic: the clock boundary it was taken at
    std::vector<uint64_t> positions;  // periodic: each worker's data position there
    Clock::time_point started;
  };
  static constexpr size_t kPeriodic = SIZE_MAX;
  static constexpr uint64_t kPeriodicKey = uint64_t{1} << 63;  // worker keys use 56 bits
  std::map<uint64_t, PendingCheckpoint> checkpoints;           // by the requester's id
  uint64_t applying = 0;                                       // BSP: clock being applied (0: none)
  Clock::time_point finish_deadline;
  ControlMessage failure_notice;  // sent to members that register after the job failed
  Clock::time_point failed_at;
  std::deque<std::pair<std::shared_ptr<Endpoint>, ControlMessage>> outbox;

  std::mutex mu;
  Status result;
  bool ended = false;
  std::atomic<bool> stop{false};
  std::thread thread;

  void Run();
  void Send(const std::shared_ptr<Endpoint>& ep, ControlMessage m) {
    outbox.emplace_back(ep, std::move(m));
  }
  void SendToRole(Role role, const ControlMessage& m) {
    for (int i : role == Role::kServer ? servers : workers) {
      if (i >= 0 && !conns[i].gone && !conns[i].removed) Send(conns[i].ep, m);
    }
  }
  void SendToAll(const ControlMessage& m) {
    SendToRole(Role::kServer, m);
    SendToRole(Role::kWorker, m);
  }
  void Flush() {
    while (!outbox.empty() && mailbox->free_slots() > 0) {
      auto& [ep, m] = outbox.front();
      Status s = ep->status().ok() ? mailbox->Send(ep.get(), m) : ep->status();
      (void)s;  // a failed member is handled through its endpoint's failure
      outbox.pop_front();
    }
  }
  std::string Describe(const Member& m) const {
    if (!m.registered) return "an unregistered connection from " + m.ep->peer_address();
    return std::string(RoleName(m.info.role)) + " " + std::to_string(m.info.index) + " (rank " +
           std::to_string(m.info.rank) + ", pid " + std::to_string(m.info.pid) + " on " +
           m.info.host + ")";
  }
  uint64_t ElapsedMs() const {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
  }
  // Drives the transport until every queued and posted message has left, or `deadline`.
  void DrainSends(Clock::time_point deadline) {
    Completion comps[32];
    while (Clock::now() < deadline &&
           (!outbox.empty() || mailbox->free_slots() < ControlMailbox::kSlots)) {
      const size_t k = t->Poll(comps);
      for (size_t i = 0; i < k; ++i) {
        if (mailbox->Owns(comps[i])) (void)mailbox->Handle(comps[i]);
      }
      Flush();
      if (k == 0) (void)t->Wait(Millis(1));
    }
  }
  void FailJob(const Member* who, const Status& why);
  // Replicas: takes server `index` out of the job if every shard keeps a live replica
  // (kServerDown to everyone, the server itself included); otherwise fails the job. `why`
  // names what was seen. Returns true when the job goes on.
  bool RemoveServer(uint32_t index, const Status& why);
  // BSP: the clock being applied is done once every live server applied it.
  void CheckApplied();
  // Replicas: a member reports it lost its connection to a server (kSuspect). A server that lost
  // every connection at once accuses all its peers while they all accuse it, so the accusations
  // of a short window are weighed together: Judge() removes the server most members accuse,
  // drops what that server said, and repeats while accusations remain. (A server whose control
  // connection fails is removed at once: OnGone.)
  void Accuse(size_t accuser, uint32_t server, const Status& why);
  void Judge();
  void ForgetAccusations(uint32_t server);
  // A checkpoint is complete once every live server answered.
  void CheckCheckpoints();
  void OnMessage(size_t ci, ControlMessage m);
  void OnGone(size_t ci, const Status& why);
  void AdvanceClocks();
  // BSP, JobSpec::checkpoint_every: at clock boundary min_clock, before the workers hear of it.
  void MaybeStartPeriodicCheckpoint();
  void FinishCheckpoint(std::map<uint64_t, PendingCheckpoint>::iterator it);
  // Releases every barrier that all workers still running have entered.
  void ReleaseBarriers();
};

void Coordinator::Impl::FailJob(const Member* who, const Status& why) {
  if (phase == Phase::kFailed || phase == Phase::kDone) return;
  phase = Phase::kFailed;
  ControlMessage f;
  f.kind = ControlKind::kFailure;
  if (who != nullptr && who->registered) {
    f.rank = who->info.rank;
    f.role = who->info.role;
    f.index = who->info.index;
  } else {
    f.rank = UINT32_MAX;
  }
  f.value = ElapsedMs();
  // Every survivor's error says who and when (the notice also carries the time in `value`).
  char when[48];
  std::snprintf(when, sizeof when, " [%.1f s into the job]", f.value / 1000.0);
  f.text = (who != nullptr ? Describe(*who) + ": " : std::string()) + why.ToString() + when;
  std::fprintf(stderr, "ferry coordinator: job failed after %.1f s: %s\n", f.value / 1000.0,
               f.text.c_str());
  SendToAll(f);
  failure_notice = f;
  failed_at = Clock::now();
  std::lock_guard<std::mutex> lock(mu);
  result = Status(why.code() == Code::kOk ? Code::kPeerFailure : why.code(), f.text);
}

void Coordinator::Impl::OnGone(size_t ci, const Status& why) {
  Member& m = conns[ci];
  if (m.gone) return;
  m.gone = true;
  const bool expected = phase == Phase::kFinishing || phase == Phase::kDone || m.removed ||
                        (m.registered && m.info.role == Role::kWorker && m.finished);
  if (expected || !m.registered) return;
  if (m.info.role == Role::kServer && job.replicas > 1 && phase == Phase::kRunning) {
    (void)RemoveServer(m.info.index, why);
    return;
  }
  FailJob(&m, why);
  // An unregistered connection that goes away (a probe, a rejected member) is not a failure.
}

bool Coordinator::Impl::RemoveServer(uint32_t index, const Status& why) {
  if (index >= servers.size() || servers[index] < 0) return true;
  Member& m = conns[servers[index]];
  if (m.removed || phase == Phase::kFailed || phase == Phase::kDone) return true;
  if (!chain.AllShardsLive(static_cast<int>(index))) {
    FailJob(&m, Status(why.code() == Code::kOk ? Code::kPeerFailure : why.code(),
                       why.message() + " (and a shard it holds has no live replica left)"));
    return false;
  }
  chain.MarkDead(index);
  m.removed = true;
  ForgetAccusations(index);
  ControlMessage d;
  d.kind = ControlKind::kServerDown;
  d.index = index;
  d.rank = m.info.rank;
  d.value = ElapsedMs();
  d.text = Describe(m) + ": " + why.ToString();
  std::fprintf(stderr,
               "ferry coordinator: server %u removed after %.1f s, its shards fail over to their "
               "replicas (%u of %zu servers left): %s\n",
               index, d.value / 1000.0, chain.live_servers(), servers.size(), d.text.c_str());
  SendToRole(Role::kServer, d);
  SendToRole(Role::kWorker, d);
  if (!m.gone) Send(m.ep, d);  // a server that is alive but unreachable stops serving
  for (auto& [id, p] : checkpoints) {
    if (p.answered.count(index) == 0) p.lost_server = true;
  }
  CheckApplied();
  CheckCheckpoints();
  return true;
}

void Coordinator::Impl::Accuse(size_t accuser, uint32_t server, const Status& why) {
  if (chain.dead(server)) return;  // removed already
  accused[server].insert(accuser);
  accused_why.emplace(server, why);
  if (judge_at == Clock::time_point()) judge_at = Clock::now() + kJudgeWindow;
}

void Coordinator::Impl::ForgetAccusations(uint32_t server) {
  accused.erase(server);
  accused_why.erase(server);
  if (server >= servers.size() || servers[server] < 0) return;
  const size_t ci = static_cast<size_t>(servers[server]);
  for (auto it = accused.begin(); it != accused.end();) {
    it->second.erase(ci);  // what a removed server said counts no more
    if (it->second.empty()) {
      accused_why.erase(it->first);
      it = accused.erase(it);
    } else {
      ++it;
    }
  }
}

void Coordinator::Impl::Judge() {
  judge_at = Clock::time_point();
  while (!accused.empty() && phase == Phase::kRunning) {
    auto most = accused.begin();
    for (auto it = accused.begin(); it != accused.end(); ++it) {
      if (it->second.size() > most->second.size()) most = it;
    }
    const uint32_t server = most->first;
    Status why = accused_why[server];
    if (most->second.size() > 1) {
      why = Status(why.code(), why.message() + " (and " + std::to_string(most->second.size() - 1) +
                                   " more members lost it)");
    }
    if (!RemoveServer(server, why)) return;  // the job failed
  }
}

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

void Coordinator::Impl::CheckCheckpoints() {
  for (auto it = checkpoints.begin(); it != checkpoints.end();) {
    bool all = true;
    for (size_t s = 0; s < servers.size() && all; ++s) {
      all = chain.dead(static_cast<uint32_t>(s)) ||
            it->second.answered.count(static_cast<uint32_t>(s)) != 0;
    }
    auto next = std::next(it);
    if (all) FinishCheckpoint(it);
    it = next;
  }
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

void Coordinator::Impl::MaybeStartPeriodicCheckpoint() {
  if (job.checkpoint_every == 0 || min_clock % job.checkpoint_every != 0 ||
      phase != Phase::kRunning) {
    return;
  }
  PendingCheckpoint p;
  p.requester = kPeriodic;
  p.clock = min_clock;
  p.started = Clock::now();
  for (int i : workers) {
    // A finished worker's position is past its data: a job it left is not resumable here.
    if (conns[i].finished || conns[i].clock != min_clock) return;
    p.positions.push_back(conns[i].position);
  }
  p.dir = job.checkpoint_dir + "/" + PeriodicCheckpointName(min_clock);
  std::error_code ec;
  std::filesystem::create_directories(p.dir, ec);
  if (ec) {
    FailJob(nullptr, Status(Code::kIoError, "checkpoint at clock " + std::to_string(min_clock) +
                                                ": create " + p.dir + ": " + ec.message()));
    return;
  }
  ControlMessage c;
  c.kind = ControlKind::kCheckpoint;
  c.value = kPeriodicKey | min_clock;
  c.text = p.dir;
  checkpoints[c.value] = std::move(p);
  SendToRole(Role::kServer, c);
}

void Coordinator::Impl::FinishCheckpoint(std::map<uint64_t, PendingCheckpoint>::iterator it) {
  PendingCheckpoint& p = it->second;
  if (p.lost_server && p.error.empty()) {
    // The servers that took over a removed server's shards copied their tables before they
    // knew: its shards may be missing. The checkpoint is not written (no manifest).
    p.error = "a server was removed during the checkpoint (its shards may be missing): retry it";
    if (p.requester == kPeriodic) {
      std::fprintf(stderr, "ferry coordinator: checkpoint at clock %llu skipped: %s\n",
                   static_cast<unsigned long long>(p.clock), p.error.c_str());
      checkpoints.erase(it);
      return;
    }
  }
  // Every shard is on disk: the manifest makes the checkpoint exist.
  if (p.error.empty()) {
    CheckpointManifest m = ManifestFor(job, p.requester == kPeriodic ? p.clock : min_clock);
    m.positions = p.positions;
    Status s = WriteManifest(p.dir, m);
    if (s.ok() && p.requester == kPeriodic) {
      s = CommitLatest(job.checkpoint_dir, PeriodicCheckpointName(p.clock), job.checkpoints_kept);
    }
    if (!s.ok()) p.error = s.ToString();
  }
  if (p.requester == kPeriodic) {
    // Checkpoints were asked for: carrying on without them would lose work silently later.
    if (!p.error.empty()) {
      FailJob(nullptr, Status(Code::kIoError, "checkpoint at clock " + std::to_string(p.clock) +
                                                  " failed: " + p.error));
    }
    checkpoints.erase(it);
    return;
  }
  ControlMessage r;
  r.kind = ControlKind::kCheckpointDone;
  r.value = it->first & ((uint64_t{1} << 40) - 1);
  r.text = p.error;
  if (!conns[p.requester].gone) Send(conns[p.requester].ep, r);
  checkpoints.erase(it);
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
      checkpoints[key] = std::move(p);
      ControlMessage c;
      c.kind = ControlKind::kCheckpoint;
      c.value = key;
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
