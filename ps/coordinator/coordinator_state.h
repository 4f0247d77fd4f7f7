// The coordinator's state (Coordinator::Impl in coordinator.h): private to coordinator*.cc; it
// includes nothing of coordinator.h. The state machine is
// split by concern: coordinator.cc (the run loop, dispatching each control kind to its handler),
// coordinator_membership.cc (registration, the start barrier, finishing, the startup timeout),
// coordinator_clocks.cc (barriers, clocks, gathers), coordinator_failover.cc (failure notices,
// removing a replicated server, weighing accusations), coordinator_checkpoints.cc (worker-asked
// and periodic checkpoints), coordinator_moves.cc (shard moves and graceful leaves),
// coordinator_joins.cc (join slots joining the running job), coordinator_takeover.cc (a standby
// taking over from the members' rejoins).
// Threading: every member is used by the coordinator's thread alone, but `result`,
// `result_without` and `ended` (guarded by mu).
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ps/coordinator/move_plan.h"
#include "ps/job/chain.h"
#include "ps/job/job.h"
#include "ps/wire/control.h"
#include "ps/wire/control_journal.h"
#include "transport/transport.h"

namespace ferry::ps {

struct CoordinatorState {
  using Clock = std::chrono::steady_clock;

  struct Member {
    std::shared_ptr<Endpoint> ep;
    bool registered = false;
    MemberInfo info;
    bool ready = false;
    bool finished = false;       // worker sent kFinish
    bool gone = false;           // connection closed or failed
    bool removed = false;        // a server taken out of the job (replicas: kServerDown)
    uint64_t clock = 0;          // workers: completed clocks
    uint64_t position = 0;       // workers: the data position reported with that clock
    uint64_t checkpoint_at = 0;  // workers: the last clock they asked a checkpoint at
    bool joining = false;        // a join slot registered while the job runs, not ready yet
    uint64_t barrier_base = 0;   // workers: barriers up to this id do not wait for it (joined)
    bool clocks_done = false;    // workers: makes no more clocks (kFinishClocks); clocks go on
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
  // The members the job starts with: every slot but the join slots (counted by registered and
  // ready; a join slot joins later, coordinator_joins.cc).
  size_t StartMembers() const {
    return servers.size() - job.join_slots + workers.size() - job.worker_join_slots;
  }
  // Conns index of worker w taking part in the job now (started with it, or joined and ready;
  // finished or not), else -1: a worker join slot not joined (yet).
  int Participant(size_t w) const {
    const int i = workers[w];
    return i >= 0 && !conns[i].joining ? i : -1;
  }
  // Workers taking part and not finished (barriers and clocks wait for these), by index.
  std::vector<uint32_t> RunningWorkerIndices() const {
    std::vector<uint32_t> running;
    for (size_t w = 0; w < workers.size(); ++w) {
      const int i = Participant(w);
      if (i >= 0 && !conns[i].finished) running.push_back(static_cast<uint32_t>(w));
    }
    return running;
  }
  size_t RunningWorkers() const { return RunningWorkerIndices().size(); }
  // Server s serves now: alive in the chains, connected, not removed, not still joining.
  bool ServingServer(uint32_t s) const {
    const int i = servers[s];
    return i >= 0 && !chain.dead(s) && !conns[i].gone && !conns[i].removed && !conns[i].joining;
  }
  enum class Phase {
    kRegistering,
    kConnecting,
    kRunning,
    kFinishing,
    kDone,
    kFailed,
    kStandby  // a standby's: waiting for rejoins (coordinator_takeover.cc), then kRunning
  } phase = Phase::kRegistering;
  std::map<uint64_t, size_t> barriers;  // id -> workers entered
  uint64_t barrier_high = 0;            // the highest barrier id entered so far
  uint64_t gather_high = 0;             // the highest gather id relayed so far
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
    bool lost_server = false;  // a server was removed meanwhile: its shards may be missing
    bool clear = false;        // kCheckpointClear: tables emptied, nothing written
    bool stats = false;        // kCheckpointStats: counters summed, nothing written
    std::vector<TableStats> table_stats;  // kCheckpointStats: the sums so far
    uint64_t clock = 0;                   // periodic: the clock boundary it was taken at
    std::vector<uint64_t> positions;      // periodic: each worker's data position there
    Clock::time_point started;
  };
  static constexpr size_t kPeriodic = SIZE_MAX;
  static constexpr uint64_t kPeriodicKey = uint64_t{1} << 63;  // worker keys use 56 bits
  std::map<uint64_t, PendingCheckpoint> checkpoints;           // by the requester's id
  uint64_t applying = 0;                                       // BSP: clock being applied (0: none)
  std::vector<uint64_t> completed_without;  // backup workers: clocks applied without worker w
  Clock::time_point finish_deadline;
  ControlMessage failure_notice;  // sent to members that register after the job failed
  Clock::time_point failed_at;
  std::deque<std::pair<std::shared_ptr<Endpoint>, ControlMessage>> outbox;
  // Standby (Coordinator::StartStandby): the primary's rank, this one's, and the takeover.
  static constexpr uint32_t kPrimaryRank = 0;  // rank 0 starts the coordinator (rendezvous.h)
  bool is_standby = false;
  uint32_t own_rank = 0;
  std::string standby_address;                // the primary's: from the standby's kRegister
  std::map<size_t, ControlJournal> rejoined;  // conns index -> what it said
  std::vector<std::pair<size_t, ControlMessage>> held;  // their later messages, until TakeOver
  Clock::time_point first_rejoin{}, takeover_by{};
  std::atomic<bool> took_over{false};

  mutable std::mutex mu;
  Status result;
  std::vector<uint64_t> result_without;  // completed_without at the shutdown (guarded by mu)
  bool ended = false;
  std::atomic<bool> stop{false};
  std::thread thread;

  void Run();
  void Send(const std::shared_ptr<Endpoint>& ep, ControlMessage m) {
    if (ep != nullptr) outbox.emplace_back(ep, std::move(m));  // null: a member lost in a takeover
  }
  void SendToRole(Role role, const ControlMessage& m) {
    for (int i : role == Role::kServer ? servers : workers) {
      if (i >= 0 && !conns[i].gone && !conns[i].removed && !conns[i].joining) {
        Send(conns[i].ep, m);
      }
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
  // Spares (JobSpec::spares): the lowest idle spare adopts removed server `dead`'s slots at the
  // tail of their chains (kChainRepair to everyone, in the order of the removals); nothing
  // without an idle spare.
  void StartRepair(uint32_t dead);
  // kChainJoined from a joining spare: its copies are complete; relayed to everyone.
  void OnChainJoined(const Member& m);
  std::map<uint32_t, Clock::time_point> repairs_started;  // joining spare -> its kChainRepair
  // Moves (elastic jobs; coordinator_moves.cc, move_plan.h). A worker's kMoveShards starts a plan
  // (one at a time); kMoveCopied and kMoveDrained from the servers advance it; a removed server
  // hands it MovePlan::Failed; the requester hears kMoveShards once it is done. A leave asked for
  // while a plan runs waits in queued_leaves (in arrival order) and is planned when it ends,
  // from the chains as they are then; other moves are refused meanwhile.
  void OnMoveShards(size_t ci, const ControlMessage& msg);
  // Whether a move plan or a join occupies the membership (a new plan waits).
  bool MovesBusy() const { return moves.has_value() || joiner >= 0; }
  void StartQueuedLeaves();
  std::deque<std::pair<size_t, ControlMessage>> queued_leaves;  // conns index, the request
  void OnMoveReport(const Member& m, const ControlMessage& msg);
  void MovesFailed(uint32_t server);
  // Sends MovePlan's actions on (to everyone, in order), and answers the requester when done.
  void SendMoveActions(const std::vector<MovePlan::Action>& actions);
  // A graceful leave's plan (kMoveLeave): the server leaving once it is done, else -1.
  void FinishLeave();
  // PlanLeave (ps/job/rebalance.h) over the chains as they serve; an error when it cannot leave.
  Result<std::vector<ShardMove>> PlanLeaveOf(uint32_t server) const;
  // PlanJoin (ps/job/rebalance.h) of a server that joined: it takes its share.
  Result<std::vector<ShardMove>> PlanJoinOf(uint32_t server) const;
  // The chains as they serve (live members not copying, head first) and the live servers.
  std::vector<std::vector<uint32_t>> ServingChains() const;
  std::vector<uint32_t> LiveServers() const;
  // Join slots (JobSpec::join_slots; coordinator_joins.cc). A join slot's kRegister while the job
  // runs: it gets the live membership and the chains, everyone else kServerJoin; once it is
  // ready (connected to every live server and worker) kStart, and its PlanJoin runs as a move
  // plan. One join at a time, and none while a move plan runs (the joining server would miss
  // its steps): a registration that arrives meanwhile, or before the job runs, waits in
  // queued_joins. A joining server that fails or leaves before it is ready is out of the job
  // (kServerLeave to everyone); a failure to start on a join slot's rank never fails the job.
  bool IsJoinSlot(uint32_t server) const {
    return server >= job.first_join_slot() && server < servers.size();
  }
  bool JoinSlotRank(uint32_t rank) const {
    return job.join_slots + job.worker_join_slots > 0 &&
           rank >= RanksNeeded(job) - job.join_slots - job.worker_join_slots;
  }
  bool IsWorkerJoinSlot(uint32_t worker) const {
    return worker >= job.workers && worker < workers.size();
  }
  // Worker join slots (coordinator_joins.cc), through the same queue as the servers': a worker
  // joining gets the live servers and the chains, the servers kWorkerJoin (they accept its
  // connection); once ready, kStart {value = the clock it starts after}: it takes part in the
  // clocks from the next boundary on. A worker that fails before it is ready is out (kWorkerLeave).
  void OnWorkerJoinRegister(size_t ci, const ControlMessage& msg);
  void OnWorkerJoinReady(Member& m);
  // kWorkerJoin from a server: it accepted the joining worker's connection.
  void OnWorkerAccepted(const Member& server, const ControlMessage& msg);
  // Starts the joining worker once it is ready and every live server accepted it.
  void MaybeStartJoiningWorker();
  std::set<uint32_t> joiner_accepted;  // servers that accepted the joining worker
  void WorkerJoinFailed(uint32_t worker, const std::string& why);
  // Coordinator::SetWorkerJoinGate's gate (under gate_mu) and its verdict: "" lets a worker in.
  std::mutex gate_mu;
  std::function<std::string()> worker_join_gate;
  std::string WorkerJoinRefusal();
  // A worker join slot the gate refused: kShutdown with the reason (its rank ends cleanly).
  void TurnAwayWorker(Member& m, uint32_t worker, const std::string& why);
  // kFinish {rank = kFinishLeave}: a worker leaves the running job (kWorkerLeave to everyone).
  void OnWorkerLeave(Member& m, const ControlMessage& msg);
  // Work dealing (coordinator_work.cc; Worker::TakeWork): per pass, the items dealt so far.
  struct WorkPass {
    uint64_t items = 0;
    uint64_t next = 0;
  };
  std::map<uint64_t, WorkPass> work;
  void OnWorkTake(const Member& m, const ControlMessage& msg);
  void OnJoinRegister(size_t ci, const ControlMessage& msg);
  // The registering member conns[ci] takes its join slot (msg's role and index) and is the joiner.
  void TakeJoinSlot(size_t ci, const ControlMessage& msg);
  void OnJoinReady(Member& m);
  void JoinFailed(uint32_t server, const std::string& why);
  void StartQueuedJoins();
  int joiner = -1;  // conns index of the server joining (registered, not ready), or -1
  std::deque<std::pair<size_t, ControlMessage>> queued_joins;
  std::optional<MovePlan> moves;
  int leaving = -1;
  size_t moves_requester = 0;  // conns index
  uint64_t moves_id = 0;
  Clock::time_point moves_started;
  // BSP: the clock being applied is done once every live server applied it.
  void CheckApplied();
  // kClockUpdate {min_clock} to the workers, and to the servers with replicas (BSP).
  void AnnounceMinClock();
  // Replicas: a member reports it lost its connection to a server (kSuspect). A server that lost
  // every connection at once accuses all its peers while they all accuse it, so the accusations
  // of a short window are weighed together: Judge() removes the server most members accuse,
  // drops what that server said, and repeats while accusations remain. (A server whose control
  // connection fails is removed at once: OnGone.)
  void Accuse(size_t accuser, uint32_t server, const Status& why);
  void Judge();
  // The processes (ranks) among a server's accusers: a rank's shard servers (server_threads)
  // share its fate and its links, so they count once.
  size_t AccuserRanks(const std::set<size_t>& accusers) const;
  void ForgetAccusations(uint32_t server);
  // A checkpoint is complete once every live server answered.
  void CheckCheckpoints();
  // Hands each control message to the handler of its kind (below), in the file of its concern.
  void OnMessage(size_t ci, ControlMessage m);
  // The run loop's steps (coordinator.cc).
  void AcceptNew();
  void OnCompletion(const Completion& c);
  // Whether the loop ends now (the job is done, or failed and its notices left).
  bool Ended(Clock::time_point now);
  // Membership (coordinator_membership.cc).
  void OnRegister(size_t ci, const ControlMessage& msg);
  // Why a registration is refused; empty when it is accepted.
  std::string RegistrationProblem(const Member& m, const ControlMessage& msg) const;
  void Reject(Member& m, const ControlMessage& msg, const std::string& why);
  void OnFailureReport(const Member& m, const ControlMessage& msg);
  void OnReady(Member& m);
  void OnFinish(Member& m, const ControlMessage& msg);
  // Past the startup deadline: fails the job naming who never registered or became ready.
  void CheckStarted();
  // Barriers, clocks, gathers (coordinator_clocks.cc).
  void OnBarrier(const Member& m, const ControlMessage& msg);
  void OnClock(Member& m, const ControlMessage& msg);
  void OnClockApplied(const Member& m, const ControlMessage& msg);
  void OnGather(const Member& m, ControlMessage msg);
  // Checkpoints (coordinator_checkpoints.cc).
  void OnCheckpointRequest(size_t ci, const ControlMessage& msg);
  void OnCheckpointDone(const Member& m, const ControlMessage& msg);
  // Replicas (coordinator_failover.cc).
  void OnSuspect(size_t ci, const ControlMessage& msg);
  void OnGone(size_t ci, const Status& why);
  void AdvanceClocks();
  // BSP, JobSpec::checkpoint_every: at clock boundary min_clock, before the workers hear of it.
  // Also off the schedule when every running worker asked for one at min_clock (kClockCheckpoint).
  void MaybeStartPeriodicCheckpoint();
  // kShutdown to all once every worker finished, unless a periodic checkpoint is being written
  // (then FinishCheckpoint calls it again).
  void MaybeShutdown();
  void FinishCheckpoint(std::map<uint64_t, PendingCheckpoint>::iterator it);
  // Backup workers: the clocks completed without each worker, on stderr and in result_without.
  void ReportBackupWorkers();
  // Releases every barrier that all workers still running have entered.
  void ReleaseBarriers();
  // Standby (coordinator_takeover.cc). A member lost the primary and says what it sent and
  // heard: kept until the takeover, or refused.
  void OnRejoin(size_t ci, const ControlMessage& msg);
  // Takes over once this rank lost the primary too (its own member rejoined) and every member
  // not on the primary's rank rejoined, or peer_timeout after that; refuses the rejoins when this
  // rank still has the primary after twice that.
  void StandbyTick(Clock::time_point now);
  // Rebuilds the job's state from the rejoins: the members lost are removed (servers, when
  // every shard keeps a copy) or fail the job (workers); the clock being applied, the job's
  // clock and the barriers waited on are told again; then the held messages are handled.
  void TakeOver();
  // The barrier each waiting worker entered: released again, or counted.
  void RestoreBarriers();
};

}  // namespace ferry::ps
