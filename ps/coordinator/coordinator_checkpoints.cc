// Checkpoints driven by the coordinator (coordinator_state.h, ps/job/checkpoint.h): a worker's
// request relayed to every server, and periodic consistent checkpoints at BSP clock boundaries; the
// manifest is written once every live server answered.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "ps/coordinator/coordinator.h"
#include "ps/coordinator/coordinator_state.h"
#include "ps/job/checkpoint.h"

namespace ferry::ps {

void Coordinator::Impl::OnCheckpointRequest(size_t ci, const ControlMessage& msg) {
  // msg.value: the worker's request id; msg.value2: 0 (save) or kCheckpointClear; msg.text: dir.
  const Member& m = conns[ci];
  if (m.info.role != Role::kWorker) return;
  // Ids are the requester's; two workers asking at once get distinct keys.
  const uint64_t key = (uint64_t{m.info.index} << 40) | (msg.value & ((uint64_t{1} << 40) - 1));
  PendingCheckpoint p;
  p.requester = ci;
  p.dir = msg.text;
  p.clear = msg.value2 == kCheckpointClear;
  p.stats = msg.value2 == kCheckpointStats;
  checkpoints[key] = std::move(p);
  ControlMessage c;
  c.kind = ControlKind::kCheckpoint;
  c.value = key;
  c.value2 = msg.value2;
  c.text = msg.text;
  SendToRole(Role::kServer, c);
}

void Coordinator::Impl::OnCheckpointDone(const Member& m, const ControlMessage& msg) {
  // msg.value: the checkpoint's key; msg.text: the server's error, empty when it wrote its shards.
  if (m.info.role != Role::kServer) return;
  auto it = checkpoints.find(msg.value);
  if (it == checkpoints.end()) return;
  PendingCheckpoint& p = it->second;
  if (!msg.text.empty() && p.error.empty()) {
    p.error = "server " + std::to_string(m.info.index) + ": " + msg.text;
  }
  if (p.stats && p.answered.insert(m.info.index).second) {
    // Each server counted the shards it heads: the sums count every shard once.
    p.table_stats.resize(std::max(p.table_stats.size(), msg.table_stats.size()));
    for (size_t t = 0; t < msg.table_stats.size(); ++t) p.table_stats[t] += msg.table_stats[t];
  }
  p.answered.insert(m.info.index);
  CheckCheckpoints();
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

void Coordinator::Impl::MaybeStartPeriodicCheckpoint() {
  const bool scheduled = job.checkpoint_every != 0 && min_clock % job.checkpoint_every == 0;
  // Asked for: every worker still running ended min_clock with kClockCheckpoint (the last clock
  // of a stream stopped cleanly), so the stream's positions there are in the checkpoint.
  bool asked = !job.checkpoint_dir.empty() && min_clock > 0;
  for (size_t w = 0; w < workers.size(); ++w) {
    const int i = Participant(w);
    asked = asked && (i < 0 || conns[i].checkpoint_at == min_clock);
  }
  if (!(scheduled || asked) || phase != Phase::kRunning) return;
  PendingCheckpoint p;
  p.requester = kPeriodic;
  p.clock = min_clock;
  p.started = Clock::now();
  for (size_t w = 0; w < workers.size(); ++w) {
    // A finished worker's position is past its data: a job it left is not resumable here; nor
    // is one whose worker join slots are not all taken (the restored job starts them all).
    const int i = Participant(w);
    if (i < 0 || conns[i].finished || conns[i].clock != min_clock) return;
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
  if (p.stats) {  // counters: nothing to write; a removed server's shards are counted by no one
    ControlMessage r;
    r.kind = ControlKind::kCheckpointDone;
    r.value = it->first & ((uint64_t{1} << 40) - 1);
    r.text = p.error;
    r.table_stats = std::move(p.table_stats);
    if (!conns[p.requester].gone) Send(conns[p.requester].ep, r);
    checkpoints.erase(it);
    return;
  }
  if (p.lost_server && p.error.empty()) {
    // The servers that took over a removed server's shards copied their tables before they
    // knew: its shards may be missing. The checkpoint is not written (no manifest).
    p.error = p.clear ? "a server was removed while the tables were emptied: retry it"
                      : "a server was removed during the checkpoint (its shards may be missing): "
                        "retry it";
    if (p.requester == kPeriodic) {
      std::fprintf(stderr, "ferry coordinator: checkpoint at clock %llu skipped: %s\n",
                   static_cast<unsigned long long>(p.clock), p.error.c_str());
      checkpoints.erase(it);
      MaybeShutdown();
      return;
    }
  }
  // Every shard is on disk: the manifest makes the checkpoint exist.
  if (p.error.empty() && !p.clear) {
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
    MaybeShutdown();
    return;
  }
  ControlMessage r;
  r.kind = ControlKind::kCheckpointDone;
  r.value = it->first & ((uint64_t{1} << 40) - 1);
  r.text = p.error;
  if (!conns[p.requester].gone) Send(conns[p.requester].ep, r);
  checkpoints.erase(it);
}

}  // namespace ferry::ps
