// Membership at the coordinator (coordinator_state.h): ranks register (checked against the job's
// fingerprint and role slots), the membership goes out once all have, kStart once all are ready,
// kShutdown once every worker finished; a rank that cannot start fails the job, and so does the
// startup timeout.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "ps/coordinator/coordinator.h"
#include "ps/coordinator/coordinator_state.h"

namespace ferry::ps {

void Coordinator::Impl::Reject(Member& m, const ControlMessage& msg, const std::string& why) {
  ControlMessage r;
  r.kind = ControlKind::kReject;
  r.text = why;
  Send(m.ep, r);
  std::fprintf(stderr, "ferry coordinator: rejected rank %u: %s\n", msg.rank, why.c_str());
}

std::string Coordinator::Impl::RegistrationProblem(const Member& m,
                                                   const ControlMessage& msg) const {
  if (m.registered) return "registered twice";
  // A join slot registers while the job runs (OnJoinRegister decides when and whether).
  const bool join = msg.role == Role::kServer ? IsJoinSlot(msg.index) : IsWorkerJoinSlot(msg.index);
  if (phase != Phase::kRegistering && !join) return "the job has already started";
  if (msg.members.size() != 1) return "registration without the member's identity";
  if (msg.value != fingerprint) {
    return "rank " + std::to_string(msg.rank) +
           " runs with a different job specification (tables, consistency, cluster "
           "shape, transport or sizes differ from rank 0's): start every rank with the "
           "same program and flags";
  }
  const auto& slots = msg.role == Role::kServer ? servers : workers;
  if (msg.index >= slots.size()) {
    return std::string(RoleName(msg.role)) + " index " + std::to_string(msg.index) +
           " is out of range";
  }
  if (slots[msg.index] >= 0 && !join) {
    return std::string(RoleName(msg.role)) + " " + std::to_string(msg.index) +
           " registered twice (two ranks with the same rank number?)";
  }
  return "";
}

void Coordinator::Impl::OnRegister(size_t ci, const ControlMessage& msg) {
  // msg.value: the job's fingerprint; msg.members[0]: the member's identity.
  Member& m = conns[ci];
  if (phase == Phase::kFailed) {
    Send(m.ep, failure_notice);
    return;
  }
  if (std::string why = RegistrationProblem(m, msg); !why.empty()) return Reject(m, msg, why);
  if (msg.role == Role::kServer ? IsJoinSlot(msg.index) : IsWorkerJoinSlot(msg.index)) {
    return OnJoinRegister(ci, msg);  // coordinator_joins.cc
  }
  auto& slots = msg.role == Role::kServer ? servers : workers;
  slots[msg.index] = static_cast<int>(ci);
  m.registered = true;
  m.info = msg.members[0];
  m.info.rank = msg.rank;
  m.info.role = msg.role;
  m.info.index = msg.index;
  if (!msg.text.empty()) standby_address = msg.text;  // the rank that runs the standby
  if (++registered == StartMembers()) {
    ControlMessage mem;
    mem.kind = ControlKind::kMembership;
    mem.text = standby_address;
    for (int i : servers) {
      if (i >= 0) mem.members.push_back(conns[i].info);  // join slots join later
    }
    for (int i : workers) {
      if (i >= 0) mem.members.push_back(conns[i].info);  // worker join slots join later
    }
    SendToAll(mem);
    phase = Phase::kConnecting;
  }
}

void Coordinator::Impl::OnFailureReport(const Member& m, const ControlMessage& msg) {
  // msg.value: ControlClient::kFailureWhileRunning, or a failure to start; msg.text: why.
  if (m.removed) return;  // it lost its peers because it was taken out
  if (m.joining) {        // coordinator_joins.cc
    return m.info.role == Role::kServer ? JoinFailed(m.info.index, msg.text)
                                        : WorkerJoinFailed(m.info.index, msg.text);
  }
  if (!m.registered && JoinSlotRank(msg.rank)) {
    // A server that could not join (a wrong slot, its own start failed): the job goes on.
    std::fprintf(stderr, "ferry coordinator: rank %u could not join the job: %s\n", msg.rank,
                 msg.text.c_str());
    return;
  }
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
}

void Coordinator::Impl::OnReady(Member& m) {
  if (m.joining && phase == Phase::kRunning) return OnJoinReady(m);  // coordinator_joins.cc
  if (m.ready || phase != Phase::kConnecting) return;
  m.ready = true;
  if (++ready == StartMembers()) {
    ControlMessage s;
    s.kind = ControlKind::kStart;
    SendToAll(s);
    phase = Phase::kRunning;
    StartQueuedJoins();  // join slots that registered early (coordinator_joins.cc)
  }
}

void Coordinator::Impl::OnFinish(Member& m, const ControlMessage& msg) {
  if (m.info.role != Role::kWorker || m.finished || m.joining) return;
  if (msg.rank == kFinishClocks) {
    // Out of data while others still train: the clocks go on without it (it waits in a barrier
    // or a gather meanwhile, which a clock waiting for it would deadlock).
    m.clocks_done = true;
    AdvanceClocks();
    return;
  }
  m.finished = true;
  if (msg.rank == kFinishLeave && job.elastic) OnWorkerLeave(m, msg);  // coordinator_joins.cc
  // The others no longer wait for this worker's clock, nor for it at a barrier (it waited
  // for its own requests before finishing: its pushes are in).
  ++finished;
  AdvanceClocks();
  ReleaseBarriers();
  MaybeShutdown();
}

void Coordinator::Impl::MaybeShutdown() {
  if (RunningWorkers() == 0 && phase == Phase::kRunning) {
    // A periodic checkpoint still being written (the one a stream's last clock asks for, often):
    // servers told to shut down now would leave before answering it, and its manifest would
    // never be written. FinishCheckpoint calls again.
    for (const auto& [key, p] : checkpoints) {
      if (p.requester == kPeriodic) return;
    }
    ReportBackupWorkers();
    ControlMessage s;
    s.kind = ControlKind::kShutdown;
    s.text = "every worker finished";
    SendToAll(s);
    // Join slots still connecting or waiting to: they leave too (ps::Node: not a failure).
    if (joiner >= 0) Send(conns[joiner].ep, s);
    for (const auto& [ci, msg] : queued_joins) Send(conns[ci].ep, s);
    phase = Phase::kFinishing;
    finish_deadline = Clock::now() + std::max(job.peer_timeout * 2, Millis(5000));
  }
}

void Coordinator::Impl::CheckStarted() {
  if (phase != Phase::kRegistering && phase != Phase::kConnecting) return;
  std::string missing;
  auto note = [&](const std::vector<int>& slots, const char* role) {
    // Not the join slots: the job does not wait for them.
    const size_t n = &slots == &servers ? job.first_join_slot() : job.workers;
    for (size_t k = 0; k < n; ++k) {
      const int i = slots[k];
      if (i < 0 || (phase == Phase::kConnecting && !conns[i].ready)) {
        missing += (missing.empty() ? "" : ", ") + std::string(role) + " " + std::to_string(k);
      }
    }
  };
  note(servers, "server");
  note(workers, "worker");
  FailJob(nullptr, Timeout(std::string(phase == Phase::kRegistering ? "never registered"
                                                                    : "never became ready") +
                           " within the startup timeout (" +
                           std::to_string(job.startup_timeout.count()) + " ms): " + missing));
}

}  // namespace ferry::ps
