// Node: one rank of a parameter-server job. Start() reads the launcher's environment
// (ferry-launch, mpirun or srun: ps/launch/launch_env.h), finds the coordinator (rank 0 starts it:
// ps/launch/rendezvous.h), takes this rank's roles (JobSpec::role_rule), brings each role up and
// returns once the whole job has passed the start barrier:
//
//   server role  JobSpec::server_threads shard servers, each: tables + staging rings registered,
//                listening; registers with the coordinator, accepts every worker's data
//                connection, then serves on its own thread;
//   worker role  arena registered; registers, connects to every server; then worker() is ready.
//
//   int main(int argc, char** argv) {
//     ferry::ps::JobSpec job = ...;                       // the same on every rank
//     auto node = ferry::ps::Node::Start(job);
//     if (!node.ok()) { report(node.status()); return 1; }
//     if (ferry::ps::Worker* w = (*node)->worker()) {
//       ... Pull / Push / Clock ...
//       if (Status s = w->Finish(); !s.ok()) { report(s); return 1; }
//     }
//     Status s = (*node)->Join();                          // servers serve until the job ends
//     return s.ok() ? 0 : 1;
//   }
//
// The data transport is JobSpec::transport ("auto": verbs, then ucx, then tcp), one instance
// per role; it listens on FERRY_DATA_HOST, or else on the local address this host uses to reach
// the coordinator. Control traffic always uses Ferry's tcp backend (ps/wire/control.h).
//
// Threading: Start, worker() and Join from one thread; each shard server and the coordinator
// run on threads of their own.
#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ps/coordinator/coordinator.h"
#include "ps/job/job.h"
#include "ps/launch/launch_env.h"
#include "ps/server/server.h"
#include "ps/wire/control.h"
#include "ps/worker/worker.h"

namespace ferry::ps {

class Node {
 public:
  static Result<std::unique_ptr<Node>> Start(const JobSpec& job);
  static Result<std::unique_ptr<Node>> Start(const JobSpec& job, const LaunchEnv& env);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  int rank() const { return env_.rank; }
  int size() const { return env_.size; }
  const LaunchEnv& env() const { return env_; }
  const RankRoles& roles() const { return roles_; }
  const std::string& coordinator_address() const { return coordinator_address_; }
  // This rank's worker, or nullptr.
  Worker* worker() { return worker_.get(); }
  // An elastic job with worker join slots (JobSpec::worker_join_slots): SIGTERM on a worker rank
  // asks its worker to leave the job (the program calls Worker::Leave at its next clock
  // boundary; ferry-train does) instead of ending the process. True once it arrived.
  bool worker_leave_requested() const;
  // This rank's first shard server, or nullptr. Its tables may be read only after Join().
  Server* server() { return servers_.empty() ? nullptr : servers_.front().server.get(); }
  // This rank's shard servers (JobSpec::server_threads of them on a server rank; ps/job/job.h),
  // in order of thread t: shard server ShardServerOf(job, roles().server, t).
  size_t num_shard_servers() const { return servers_.size(); }
  Server* shard_server(size_t t) { return servers_[t].server.get(); }
  // Rank 0's coordinator, or nullptr; on rank 1 of a job with replicas, the standby until Join
  // (after Join only if it took over).
  const Coordinator* coordinator() const { return coordinator_.get(); }
  // Rank 0: Coordinator::SetWorkerJoinGate on its coordinator; elsewhere nothing. Any thread.
  void SetWorkerJoinGate(std::function<std::string()> gate) {
    if (coordinator_ != nullptr) coordinator_->SetWorkerJoinGate(std::move(gate));
  }
  // The rank that runs the standby coordinator when JobSpec::replicas > 1 (coordinator.h).
  static constexpr int kStandbyRank = 1;

  // Waits for this rank's roles to end: the server serves until the job shuts down, the
  // coordinator (rank 0) until every member left. A worker must have called Finish() first
  // (Join calls it if it did not). Returns the first failure of any role, naming it.
  Status Join();

 private:
  Node() = default;
  Status StartRoles(const JobSpec& job);
  // Tells the coordinator this rank could not start, so the job fails at once, naming it.
  void ReportStartFailure(const JobSpec& job, const Status& why);
  Result<std::unique_ptr<Transport>> CreateDataTransport(const JobSpec& job, Role role,
                                                         uint32_t index);
  Result<ControlClient*> RegisterRole(const JobSpec& job, Role role, uint32_t index,
                                      const std::string& data_address, Transport* data,
                                      std::unique_ptr<ControlClient>* out);

  LaunchEnv env_;
  RankRoles roles_;
  std::string coordinator_address_;
  std::string data_host_;
  std::string standby_address_;  // kStandbyRank's: its standby coordinator
  std::unique_ptr<Coordinator> coordinator_;
  // One shard server: its control connection, the thread that starts and then serves it.
  struct ShardServer {
    uint32_t index = 0;  // shard server index
    std::unique_ptr<ControlClient> control;
    std::unique_ptr<Server> server;
    std::thread thread;
    Status status;
    // Set by the thread once it passed the start barrier (or failed before): Start waits for
    // it, so that a server-only rank also returns only when the whole job has started.
    std::promise<Status> started;
  };
  void RunShardServer(ShardServer* s, Millis timeout);
  // The worker's start: membership, connections (a worker join slot's into the running job),
  // ready, start. Cancelled when the job ended first.
  Status StartWorker(const JobSpec& job);

  std::unique_ptr<ControlClient> worker_control_;
  std::vector<ShardServer> servers_;  // sized once, before any thread starts
  std::unique_ptr<Worker> worker_;
  bool worker_finished_ = false;
  std::atomic<bool> stopping_{false};
  bool job_worker_leaves_ = false;  // SIGTERM asks this rank's worker to leave
};

// The data transport a job uses ("auto" resolved), for reports.
Result<std::string> ResolveTransportName(const JobSpec& job);

}  // namespace ferry::ps
