// What every rank of a parameter-server job agrees on: the tables, the consistency model, the
// cluster shape, the transport and the data-path sizes. Every rank builds the same JobSpec (the
// same program with the same flags); the coordinator compares fingerprints at registration and
// refuses a rank whose spec differs, naming the rank.
//
// Roles: rank 0 always hosts the coordinator (a thread). Servers and workers by RoleRule:
//   kServersFirst  size == servers + workers; ranks [0, S) are servers, [S, S+W) workers.
//   kColocated     size == max(servers, workers); rank r is server r (r < S) and worker r (r < W).
//
// Server threads (JobSpec::server_threads = T): a server rank hosts T shard servers, each a whole
// Server (its own tables, transport, progress and thread), so the keys are partitioned over
// S*T shard servers and requests for different ones proceed in parallel with no shared lock.
// Server rank r hosts shard servers r, r+S, ..., r+(T-1)*S (ShardServerOf): consecutive shard
// indices sit on consecutive ranks, so a chain (ps/job/chain.h: s, s+1, ..., s+R-1 with
// R <= S) never keeps two copies of a shard in one process.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ps/job/chain.h"
#include "ps/store/admission.h"
#include "ps/store/optimizer.h"
#include "transport/status.h"
#include "transport/transport.h"

namespace ferry::ps {

using Millis = std::chrono::milliseconds;

enum class Consistency : uint8_t { kBsp, kSsp, kAsp };
struct ConsistencySpec {
  Consistency kind = Consistency::kAsp;
  uint32_t staleness = 0;  // SSP's bound s; 0 for BSP and ASP
  bool operator==(const ConsistencySpec&) const = default;
};
// "bsp", "asp", "ssp:S" (S >= 1; "ssp:0" is BSP without deferred apply, refused: say "bsp").
Result<ConsistencySpec> ParseConsistency(std::string_view text);
std::string ConsistencyName(const ConsistencySpec& spec);

struct TableSpec {
  std::string name;
  uint32_t dim = 8;
  OptimizerSpec optimizer;
  InitializerSpec init;
  AdmissionOptions admission;
  // Keep a half-precision copy of the weights in each row (refreshed on every update) so that
  // pulls of this table ship 2 bytes per weight, still straight out of the rows.
  bool fp16_pull = false;
  // Per server rank; its server_threads shard servers get an equal share each
  // (ShardServerTable).
  size_t initial_rows = 1u << 16;
  size_t max_rows = 0;  // 0 = unbounded
  // Eviction on the servers' tick (JobSpec::evict_tick; docs/ps.md "Admission and eviction"):
  // every tick each server erases the rows of this table not seen (pulled or pushed) for more
  // than `evict_unseen_ticks` ticks (0: never), and those whose decayed score (sightings,
  // halved every `score_half_life` ticks; 0: no decay) is below `evict_score` (0: never).
  uint32_t evict_unseen_ticks = 0;
  float evict_score = 0.0f;
  double score_half_life = 0.0;
};

// Whether the servers may erase rows of `t` while serving (a max_rows bound or tick eviction):
// one-sided readers must then check the reuse generation (docs/ps.md "One-sided pulls").
bool TableEvicts(const TableSpec& t);
// Whether a table records sightings (admission, a bound or eviction): its requests take the
// per-key Access() path on the servers.
bool TableTracksSightings(const TableSpec& t);

enum class RoleRule : uint8_t { kServersFirst, kColocated };
Result<RoleRule> ParseRoleRule(std::string_view text);  // "servers-first" | "colocated"
std::string_view RoleRuleName(RoleRule rule);

enum class Role : uint8_t;  // ps/wire/control.h

// A test hook: see JobSpec::wrap_data_transport.
using DataTransportWrapper =
    std::function<std::unique_ptr<Transport>(std::unique_ptr<Transport>, Role, uint32_t index)>;

struct JobSpec {
  std::vector<TableSpec> tables;
  ConsistencySpec consistency;
  uint32_t servers = 1;  // server ranks
  uint32_t workers = 1;
  // Shard servers per server rank (1..64; see the top of this file). A table's initial_rows
  // and max_rows stay per server rank (split over its shard servers); staging_bytes is per
  // (worker, shard server).
  uint32_t server_threads = 1;
  // The shard servers of the job: the count the partition, the chains, the coordinator's
  // membership and the workers' connections use.
  uint32_t shard_servers() const { return servers * server_threads; }
  // Shard servers, spares and join slots: every server index is below this.
  uint32_t server_members() const { return shard_servers() + spares + join_slots; }
  // The server index of join slot 0 (join_slots, below).
  uint32_t first_join_slot() const { return shard_servers() + spares; }
  // Shards: how many parts the partition cuts the keys into (ps/job/partition.h); 0 (the
  // default) is one per shard server, as before shards existed. More shards than shard servers
  // (up to 65535) puts several on each (shard q starts on shard server q mod shard_servers(),
  // ps/job/chain.h): the unit a change of membership moves (docs/ps.md "Shards"). Requires
  // shards >= shard_servers(); not with spares yet.
  uint32_t shards = 0;
  uint32_t num_shards() const { return shards == 0 ? shard_servers() : shards; }
  RoleRule role_rule = RoleRule::kServersFirst;
  std::string transport = "auto";  // auto | verbs | ucx | tcp
  std::map<std::string, std::string> transport_params;
  // A dead or silent member is reported to every survivor within this (plus about one progress
  // interval: measured 4.1-4.2 s with the default on a black-holed link, docs/reliability.md).
  Millis peer_timeout{4000};
  Millis startup_timeout{60000};  // registration, connections and the start barrier
  std::string secret;             // shared by every connection when set

  // Data-path sizes.
  uint64_t staging_bytes = 16ull << 20;      // per (worker, server): the request ring on the server
  uint64_t arena_bytes = 64ull << 20;        // per worker: where pulled rows land
  uint64_t send_bytes = 64ull << 20;         // per worker: request headers, keys and gradients
  uint32_t max_keys_per_request = 1u << 16;  // the worker splits larger pulls/pushes
  uint32_t max_outstanding = 64;             // requests in flight per (worker, server)
  uint32_t virtual_nodes = 128;              // consistent hashing
  uint64_t partition_seed = 0;

  // Restore every table from this checkpoint (ps/job/checkpoint.h) at startup; empty: start fresh.
  // The row owners follow this job's partition, whatever the checkpoint's server count was.
  // The job then starts at the checkpoint's clock, and each worker finds its data position
  // (Worker::restored()). A directory of periodic checkpoints names its newest one (LATEST).
  std::string restore_dir;

  // Periodic checkpoints (BSP only): every `checkpoint_every` clocks the coordinator has each
  // server copy its shards at the clock boundary (the copy is the only pause; the files are
  // written in the background) into checkpoint_dir/clock-C, then writes the manifest with every
  // worker's data position, and moves checkpoint_dir/LATEST to it. 0: off.
  std::string checkpoint_dir;
  uint64_t checkpoint_every = 0;
  uint32_t checkpoints_kept = 2;  // older periodic checkpoints are deleted

  // Chain replication (ps/job/chain.h, docs/ps.md "Replicas"): each server's shard also lives on
  // the next replicas-1 servers. A push is acknowledged once the chain's tail applied (BSP:
  // staged) it; pulls are served by the head. A dead server's shards fail over to their next
  // live member while the job runs: no restart, no acknowledged update lost, none applied twice.
  // 1 = off. At most `servers`. In tables with admission, a max_rows bound or tick eviction the
  // head alone decides which rows are created and evicted, and every replica applies its
  // decisions in its order (docs/ps.md "Replicas").
  // With replicas > 1 rank 1 also runs a standby coordinator that takes over when rank 0 dies
  // (ps/coordinator/coordinator.h, "Standby"), unless `coordinator_standby` is off: a program
  // whose rank 0 holds what the job cannot go on without (ferry-train's stream dealt by rank 0)
  // turns it off, and then losing rank 0 ends the job as without replicas. Not in the
  // fingerprint: only rank 1 reads it.
  uint32_t replicas = 1;
  bool coordinator_standby = true;
  // Spares (replicas >= 2, server_threads 1; ps/job/chain.h "Repairs"): `spares` more server
  // ranks that hold no shard at the start, connected to like any server. After a failover one of
  // them adopts the dead server's shards, copies them from their live tails while pushes go on
  // and joins those chains at the tail, so a shard is back to `replicas` copies. Spare ranks come
  // after every other rank; a spare's server index is shard_servers() + j.
  uint32_t spares = 0;
  // Elastic jobs (ps/job/rebalance.h, ps/coordinator/move_plan.h, docs/ps.md "Moving shards"):
  // shards move between live servers. Every shard server then connects to every other one (any
  // of them may become a shard's successor) and registers a forward ring for each, and pushes go
  // through the chain machinery even with replicas 1 (a moving shard's target is forwarded to).
  // One-sided pulls are off (a shard's rows may change server). SIGTERM to a server rank is a
  // graceful leave (ps::Node; Worker::RetireServer). No spares, server_threads 1.
  bool elastic = false;
  // Join slots (elastic jobs; docs/ps.md "Joining"): `join_slots` more server ranks, after every
  // other rank, that the job does not wait for. Each may start any time while the job runs (a
  // late rank: ferry-launch --join), registers with the coordinator, is connected to by every
  // worker and server, and then takes its share of the shards (PlanJoin, ps/job/rebalance.h)
  // while the job goes on. Join slot j is server first_join_slot() + j; 0..64.
  uint32_t join_slots = 0;
  // Worker join slots (elastic jobs; docs/ps.md "Workers joining and leaving"): `worker_join_slots`
  // more worker ranks, the very last ranks, that the job does not wait for. Each may start while
  // the job runs: it registers, connects to every live server (whose staging rings are reserved
  // for it from the start: worker_members()), and takes part from the next clock boundary on.
  // Worker join slot j is worker `workers` + j; 0..64. (Any worker may leave: Worker::Leave.)
  uint32_t worker_join_slots = 0;
  // Workers and worker join slots: every worker index is below this.
  uint32_t worker_members() const { return workers + worker_join_slots; }
  // Whether pushes may be forwarded to another server: replicas, or moves.
  bool forwards() const { return replicas > 1 || elastic; }

  // The servers' eviction tick: every `evict_tick` each server advances the tick of every table
  // that evicts or decays scores (TableSpec::evict_unseen_ticks, evict_score, score_half_life)
  // and erases the rows those ask it to, between requests. Must be > 0.
  Millis evict_tick{1000};

  // Pushes: drop gradient rows whose largest |g| is below this (0: off; OSDI'14's significance
  // filter), and ship gradients as fp16.
  float push_filter = 0.0f;
  bool fp16_push = false;

  // Backup workers (BSP only; TensorFlow's SyncReplicas semantics, docs/ps.md "Backup workers"):
  // a clock completes once all running workers but `backup_workers` of them ended it; the pushes
  // of the workers it completed without are dropped (counted by the servers, never applied), and
  // those workers skip ahead to the job's clock (Worker::Clock). 0: every worker, as always.
  // Less than `workers`.
  uint32_t backup_workers = 0;

  // Hash of everything above that must match across ranks.
  uint64_t Fingerprint() const;

  // Test hook, local to this process and not part of the fingerprint: when set, each role's data
  // transport (server `index` or worker `index`) is handed to it right after creation, before
  // any memory is registered or connection made, and the role uses what it returns (e.g. a
  // transport/fault/ wrapper owning the one passed in; returning it unchanged is allowed). It
  // runs on the rank's starting thread; the returned transport must honour the Transport
  // contract. Control traffic (ps/wire/control.h) is never wrapped.
  DataTransportWrapper wrap_data_transport;
};

// The table as one of `server_threads` shard servers of a rank holds it: initial_rows and
// max_rows divided among them (rounded up, so a bound is never 0).
TableSpec ShardServerTable(const TableSpec& t, uint32_t server_threads);
// The table as one shard of `job` holds it: initial_rows and max_rows divided among the shards
// a server rank starts with (ceil(num_shards / servers); server_threads when there is one shard
// per shard server).
TableSpec ShardTable(const TableSpec& t, const JobSpec& job);

// The chains every process of `job` starts from (chain.h): join slots are members above the
// spares, dead until they join (ChainMap::Revive).
ChainMap JobChains(const JobSpec& job);

// Checks ranges and consistency (names unique, dims > 0, sizes sane); names the bad field.
Status ValidateJob(const JobSpec& job);

struct RankRoles {
  bool coordinator = false;
  int server = -1;           // server rank index, -1 if none (its shard servers: ShardServerOf)
  int spare = -1;            // spare index j (server shard_servers() + j), -1 if none
  int join = -1;             // join slot j (server first_join_slot() + j), -1 if none
  int worker = -1;           // worker index, -1 if none (a worker join slot's: workers + j)
  bool worker_join = false;  // the worker is a join slot (JobSpec::worker_join_slots)
};
// The roles of `rank` in a job of `size` ranks; kInvalidArgument if size does not fit the rule.
Result<RankRoles> RolesOf(const JobSpec& job, int rank, int size);
// Ranks a job needs under its role rule.
int RanksNeeded(const JobSpec& job);
// The t-th shard server (t < server_threads) of server rank `server`, and back.
inline uint32_t ShardServerOf(const JobSpec& job, uint32_t server, uint32_t t) {
  return t * job.servers + server;
}
inline uint32_t ServerRankOf(const JobSpec& job, uint32_t shard_server) {
  return shard_server % job.servers;
}

}  // namespace ferry::ps
