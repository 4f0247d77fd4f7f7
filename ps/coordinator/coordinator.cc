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

void Coordinator::Impl::OnMessage(size_t ci, ControlMessage msg) {
  Member& m = conns[ci];
  if (msg.kind == ControlKind::kRejoin) return OnRejoin(ci, msg);  // coordinator_takeover.cc
  if (phase == Phase::kStandby && msg.kind != ControlKind::kRegister) {
    if (rejoined.count(ci) != 0) held.emplace_back(ci, std::move(msg));
    return;
  }
  if (msg.kind == ControlKind::kRegister) return OnRegister(ci, msg);     // membership
  if (msg.kind == ControlKind::kFailure) return OnFailureReport(m, msg);  // membership
  if (!m.registered) return;  // ignore anything before registration
  if (m.removed) return;      // a server out of the job: its shards have moved on
  switch (msg.kind) {
    case ControlKind::kSuspect:
      return OnSuspect(ci, msg);  // coordinator_failover.cc
    case ControlKind::kChainJoined:
      return OnChainJoined(m);  // coordinator_failover.cc
    case ControlKind::kMoveShards:
      return OnMoveShards(ci, msg);  // coordinator_moves.cc
    case ControlKind::kMoveCopied:
    case ControlKind::kMoveDrained:
      return OnMoveReport(m, msg);
    case ControlKind::kReady:
      return OnReady(m);  // membership
    case ControlKind::kFinish:
      return OnFinish(m, msg);  // membership
    case ControlKind::kBarrier:
      return OnBarrier(m, msg);  // clocks
    case ControlKind::kClock:
      return OnClock(m, msg);
    case ControlKind::kClockApplied:
      return OnClockApplied(m, msg);
    case ControlKind::kGather:
      return OnGather(m, std::move(msg));
    case ControlKind::kCheckpoint:
      return OnCheckpointRequest(ci, msg);  // checkpoints
    case ControlKind::kCheckpointDone:
      return OnCheckpointDone(m, msg);
    case ControlKind::kWorkerJoin:
      return OnWorkerAccepted(m, msg);  // coordinator_joins.cc
    case ControlKind::kWorkTake:
      return OnWorkTake(m, msg);  // coordinator_work.cc
    default:
      return;  // messages only the coordinator sends
  }
}

void Coordinator::Impl::AcceptNew() {
  // New connections: those whose handshake completed in an earlier Poll or Wait.
  while (true) {
    auto ep = t->Accept(Millis(0));
    if (!ep.ok()) break;
    by_ep[(*ep)->id()] = conns.size();
    Member nm;
    nm.ep = std::move(ep).value();
    conns.push_back(std::move(nm));
  }
}

void Coordinator::Impl::OnCompletion(const Completion& c) {
  if (!mailbox->Owns(c)) return;
  auto r = mailbox->Handle(c);
  auto it = c.ep != nullptr ? by_ep.find(c.ep->id()) : by_ep.end();
  if (c.ep != nullptr && it == by_ep.end()) {
    // The handshake completed in this very Poll and the peer's first message (kRegister)
    // arrived right behind it: the endpoint is still waiting in Accept's queue. Dropping
    // the message here left that member "never registered" until the startup timeout.
    AcceptNew();
    it = by_ep.find(c.ep->id());
  }
  if (!r.ok()) {
    if (it != by_ep.end()) {
      // A malformed message closes that member only (and fails the job if it mattered).
      conns[it->second].ep->Close();
      OnGone(it->second, r.status());
    }
    return;
  }
  if (r->has_value() && it != by_ep.end()) OnMessage(it->second, std::move(**r));
}

bool Coordinator::Impl::Ended(Clock::time_point now) {
  if (phase == Phase::kFinishing) {
    const bool all_gone = std::all_of(conns.begin(), conns.end(),
                                      [](const Member& m) { return m.gone || !m.registered; });
    if ((all_gone && outbox.empty()) || now > finish_deadline) phase = Phase::kDone;
  }
  if (phase == Phase::kFailed) {
    // Members still starting would wait for the startup timeout: stay a little longer to
    // answer their registration with the failure. Then let the notices leave, and end.
    const bool waiting = registered < StartMembers();
    if (!waiting || now > failed_at + std::min(job.startup_timeout, Millis(3000))) {
      DrainSends(now + Millis(1000));
      return true;
    }
  }
  if (phase == Phase::kDone) {
    DrainSends(now + Millis(1000));
    return true;
  }
  return false;
}

void Coordinator::Impl::Run() {
  const auto startup_deadline = Clock::now() + job.startup_timeout;
  Completion comps[32];
  while (!stop) {
    AcceptNew();
    const size_t n = t->Poll(comps);
    for (size_t i = 0; i < n; ++i) OnCompletion(comps[i]);
    for (size_t ci = 0; ci < conns.size(); ++ci) {
      if (!conns[ci].gone && !conns[ci].ep->status().ok()) OnGone(ci, conns[ci].ep->status());
    }
    Flush();
    const auto now = Clock::now();
    if (now > startup_deadline) CheckStarted();
    if (Ended(now)) break;
    if (judge_at != Clock::time_point() && Clock::now() >= judge_at) Judge();
    if (phase == Phase::kStandby) StandbyTick(now);
    Millis wait(phase == Phase::kRunning || phase == Phase::kStandby ? 50 : 5);
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
  for (auto& m : impl_->conns) {
    if (m.ep != nullptr) m.ep->Close();  // null: a member lost in a takeover
  }
  impl_->conns.clear();
  impl_->mailbox.reset();
  impl_->t.reset();
}

Result<std::unique_ptr<Coordinator>> Coordinator::Start(const JobSpec& job,
                                                        const std::string& bind_address) {
  return Create(job, bind_address, false, 0);
}

Result<std::unique_ptr<Coordinator>> Coordinator::StartStandby(const JobSpec& job,
                                                               const std::string& bind_address,
                                                               uint32_t rank) {
  return Create(job, bind_address, true, rank);
}

Result<std::unique_ptr<Coordinator>> Coordinator::Create(const JobSpec& job,
                                                         const std::string& bind_address,
                                                         bool standby, uint32_t rank) {
  FERRY_RETURN_IF_ERROR(ValidateJob(job));
  auto impl = std::make_unique<Impl>();
  if (standby) impl->phase = Impl::Phase::kStandby;
  impl->is_standby = standby;
  impl->own_rank = rank;
  impl->job = job;
  impl->fingerprint = job.Fingerprint();
  impl->servers.assign(job.server_members(), -1);
  impl->workers.assign(job.worker_members(), -1);
  impl->completed_without.assign(job.worker_members(), 0);
  impl->chain = JobChains(job);
  impl->server_applied.assign(job.server_members(), 0);
  if (!job.restore_dir.empty()) {
    // A restored job goes on from the checkpoint's clock (the workers start there too).
    FERRY_ASSIGN_OR_RETURN(CheckpointManifest m, ReadManifest(job.restore_dir));
    impl->min_clock = m.clock;
  }
  TransportOptions o = ControlTransportOptions(job);
  o.max_endpoints = job.server_members() + job.worker_members() + 64;
  FERRY_ASSIGN_OR_RETURN(impl->t, CreateTransport("tcp", o));
  FERRY_ASSIGN_OR_RETURN(
      impl->mailbox,
      ControlMailbox::Create(impl->t.get(), 16 + job.server_members() + job.worker_members()));
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

bool Coordinator::standing_by() const {
  return impl_->is_standby && !impl_->took_over;
}

void Coordinator::SetWorkerJoinGate(std::function<std::string()> gate) {
  std::lock_guard<std::mutex> lock(impl_->gate_mu);
  impl_->worker_join_gate = std::move(gate);
}

std::vector<uint64_t> Coordinator::ClocksCompletedWithout() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->result_without;
}

}  // namespace ferry::ps
