// The coordinator: membership, the start barrier, worker barriers, clocks (BSP/SSP/ASP), gathers,
// shutdown and failure notices. One per job, a thread in rank 0. It never touches data: ranks
// exchange their data-transport addresses through it (kMembership) and then talk directly.
//
// Lifecycle:
//   registering  every expected member (servers 0..S-1, workers 0..W-1) sends kRegister with the
//                job fingerprint; a member whose fingerprint, role or index is wrong gets
//                kReject. When all have registered: kMembership to all.
//   connecting   workers connect to servers; each member sends kReady; all ready: kStart.
//   running      barriers, clocks, gathers. Under BSP a clock advances only after every server
//                applied the pushes of the clocks before it (kApplyClock / kClockApplied).
//   finishing    every worker sent kFinish: kShutdown to all; members disconnect.
//   failed       a member's connection failed (or it never registered within the startup
//                timeout) before the job finished: kFailure {who, why, when} to every survivor.
//
// Standby (JobSpec::replicas > 1): rank 1 runs a second coordinator that listens and waits
// (StartStandby); its address reaches every member in kMembership. When rank 0 dies, each
// member's control client rejoins it with what it sent and heard (ps/wire/control_journal.h);
// once its own rank lost rank 0 too, it rebuilds the job's state from those journals, removes
// the members lost with rank 0 (server 0's shards fail over to their replicas) and runs the job
// on (coordinator_takeover.cc). Nothing is mirrored while the job runs.
//
// Threading: Start() returns once listening; everything else runs on the coordinator's thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ps/job/job.h"
#include "transport/status.h"

namespace ferry::ps {

struct CoordinatorState;

class Coordinator {
 public:
  // Binds `bind_address` ("host:port", port 0 picks one) and starts the coordinator thread.
  static Result<std::unique_ptr<Coordinator>> Start(const JobSpec& job,
                                                    const std::string& bind_address);
  // A standby for the coordinator on rank 0 (see above); `rank` is this rank.
  static Result<std::unique_ptr<Coordinator>> StartStandby(const JobSpec& job,
                                                           const std::string& bind_address,
                                                           uint32_t rank);
  ~Coordinator();  // stops the thread (an unfinished job is abandoned)
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // The bound "host:port".
  const std::string& address() const;
  // Blocks until the job ended: Ok after a clean shutdown, the first failure otherwise.
  Status Join();
  // Backup workers (JobSpec::backup_workers): how many clocks completed without each worker (its
  // pushes for them dropped), as of the shutdown. Empty before the job ended. Any thread.
  std::vector<uint64_t> ClocksCompletedWithout() const;
  // A standby that has not taken over (Join would wait for a job it does not run). Any thread.
  bool standing_by() const;
  // Worker join slots (JobSpec::worker_join_slots) are let in only while `gate` returns "": it is
  // asked on the coordinator's thread when a slot registers and again just before it would take
  // part (kStart). A reason turns the slot away: it hears kShutdown with it and its rank ends
  // without joining, as when the job ended first (ps/node.h). For a program whose workers' input
  // can end (ferry-train's stream: a worker that joins once every worker took the input's end
  // would miss the collectives that end it). `gate` must be cheap, not block, and stay callable
  // while the coordinator runs. Any thread; nullptr: every slot is let in (the default).
  void SetWorkerJoinGate(std::function<std::string()> gate);

  using Impl = CoordinatorState;  // coordinator_state.h

 private:
  explicit Coordinator(std::unique_ptr<Impl> impl);
  static Result<std::unique_ptr<Coordinator>> Create(const JobSpec& job,
                                                     const std::string& bind_address, bool standby,
                                                     uint32_t rank);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::ps
