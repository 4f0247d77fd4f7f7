// JobSpec parsing, validation, fingerprint and the rank -> role rule (see job.h).
#include "ps/job/job.h"

#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <set>
#include <string>
#include <type_traits>

namespace ferry::ps {

Result<ConsistencySpec> ParseConsistency(std::string_view text) {
  if (text == "bsp") return ConsistencySpec{Consistency::kBsp, 0};
  if (text == "asp") return ConsistencySpec{Consistency::kAsp, 0};
  if (text.substr(0, 4) == "ssp:") {
    uint32_t s = 0;
    const std::string_view num = text.substr(4);
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), s);
    if (ec == std::errc() && p == num.data() + num.size() && s >= 1 && s <= 1000000) {
      return ConsistencySpec{Consistency::kSsp, s};
    }
  }
  return InvalidArgument("consistency '" + std::string(text) +
                         "' is not bsp, asp or ssp:S with a staleness bound S >= 1");
}

std::string ConsistencyName(const ConsistencySpec& spec) {
  switch (spec.kind) {
    case Consistency::kBsp:
      return "bsp";
    case Consistency::kAsp:
      return "asp";
    case Consistency::kSsp:
      return "ssp:" + std::to_string(spec.staleness);
  }
  return "?";
}

Result<RoleRule> ParseRoleRule(std::string_view text) {
  if (text == "servers-first") return RoleRule::kServersFirst;
  if (text == "colocated") return RoleRule::kColocated;
  return InvalidArgument("role rule '" + std::string(text) + "' is not servers-first or colocated");
}

std::string_view RoleRuleName(RoleRule rule) {
  return rule == RoleRule::kColocated ? "colocated" : "servers-first";
}

namespace {

// Collects the bytes of each field one by one (no padding bytes), hashed at the end.
class Hasher {
 public:
  template <typename T>
  void Add(const T& v) {
    static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>);
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void Add(const std::string& s) {
    Add(static_cast<uint64_t>(s.size()));
    bytes_.append(s);
  }
  uint64_t Digest() const { return XXH3_64bits(bytes_.data(), bytes_.size()); }

 private:
  std::string bytes_;
};

}  // namespace

uint64_t JobSpec::Fingerprint() const {
  Hasher h;
  h.Add(uint64_t{tables.size()});
  for (const TableSpec& t : tables) {
    h.Add(t.name);
    h.Add(t.dim);
    const OptimizerSpec& o = t.optimizer;
    h.Add(o.kind);
    for (float f : {o.learning_rate, o.l2, o.l1, o.initial_accumulator, o.eps, o.alpha, o.beta,
                    o.beta1, o.beta2}) {
      h.Add(f);
    }
    h.Add(t.init.kind);
    h.Add(t.init.a);
    h.Add(t.init.b);
    h.Add(t.init.seed);
    h.Add(t.admission.kind);
    h.Add(t.admission.min_count);
    h.Add(t.admission.probability);
    h.Add(t.fp16_pull);
    h.Add(uint64_t{t.max_rows});
    h.Add(t.evict_unseen_ticks);
    h.Add(t.evict_score);
    h.Add(t.score_half_life);
  }
  h.Add(consistency.kind);
  h.Add(consistency.staleness);
  h.Add(servers);
  h.Add(workers);
  h.Add(server_threads);
  h.Add(role_rule);
  h.Add(transport);
  h.Add(uint64_t{transport_params.size()});
  for (const auto& [k, v] : transport_params) {
    h.Add(k);
    h.Add(v);
  }
  h.Add(staging_bytes);
  h.Add(arena_bytes);
  h.Add(send_bytes);
  h.Add(max_keys_per_request);
  h.Add(max_outstanding);
  h.Add(virtual_nodes);
  h.Add(partition_seed);
  h.Add(push_filter);
  h.Add(fp16_push);
  h.Add(replicas);
  h.Add(backup_workers);
  h.Add(spares);
  if (elastic) h.Add(std::string("elastic"));  // only when set: older fingerprints stay
  if (join_slots > 0) h.Add(std::string("join_slots ") + std::to_string(join_slots));
  if (worker_join_slots > 0) {
    h.Add(std::string("worker_join_slots ") + std::to_string(worker_join_slots));
  }
  // Only when set apart from the default, so the jobs before shards keep their fingerprints.
  if (num_shards() != shard_servers()) h.Add(num_shards());
  h.Add(static_cast<uint64_t>(evict_tick.count()));
  h.Add(checkpoint_dir);
  h.Add(checkpoint_every);
  h.Add(restore_dir);
  return h.Digest();
}

bool TableEvicts(const TableSpec& t) {
  return t.max_rows != 0 || t.evict_unseen_ticks != 0 || t.evict_score > 0.0f;
}

bool TableTracksSightings(const TableSpec& t) {
  return t.admission.kind != AdmissionOptions::Kind::kAlways || TableEvicts(t);
}

TableSpec ShardServerTable(const TableSpec& t, uint32_t server_threads) {
  TableSpec out = t;
  const size_t n = std::max<uint32_t>(server_threads, 1);
  out.initial_rows = (t.initial_rows + n - 1) / n;
  out.max_rows = (t.max_rows + n - 1) / n;
  return out;
}

TableSpec ShardTable(const TableSpec& t, const JobSpec& job) {
  const uint32_t servers = std::max<uint32_t>(job.servers, 1);
  return ShardServerTable(t, (job.num_shards() + servers - 1) / servers);
}

Status ValidateJob(const JobSpec& job) {
  if (job.tables.empty()) return InvalidArgument("job declares no table");
  if (job.tables.size() > 65535) return InvalidArgument("job declares more than 65535 tables");
  std::set<std::string> names;
  for (const TableSpec& t : job.tables) {
    if (t.name.empty()) return InvalidArgument("a table has an empty name");
    if (!names.insert(t.name).second) {
      return InvalidArgument("table name '" + t.name + "' is declared twice");
    }
    if (t.dim == 0 || t.dim > (1u << 20)) {
      return InvalidArgument("table '" + t.name + "': dim " + std::to_string(t.dim) +
                             " must be 1..1048576");
    }
    Status s = ValidateOptimizer(t.optimizer);
    if (!s.ok()) return s.Annotate("table '" + t.name + "'");
    if (t.init.kind == InitializerSpec::Kind::kUniform && !(t.init.a <= t.init.b)) {
      return InvalidArgument("table '" + t.name + "': uniform initializer needs low <= high");
    }
    if (t.init.kind == InitializerSpec::Kind::kNormal && !(t.init.b >= 0.0f)) {
      return InvalidArgument("table '" + t.name + "': normal initializer needs stddev >= 0");
    }
    if (!(t.evict_score >= 0.0f) || !(t.score_half_life >= 0.0)) {
      return InvalidArgument("table '" + t.name +
                             "': evict_score and score_half_life must be >= 0");
    }
  }
  if (job.servers == 0) return InvalidArgument("a job needs at least one server");
  if (job.workers == 0) return InvalidArgument("a job needs at least one worker");
  if (job.servers > 4096 || job.workers > 65535) {
    return InvalidArgument("at most 4096 servers and 65535 workers");
  }
  if (job.server_threads == 0 || job.server_threads > 64) {
    return InvalidArgument("server_threads " + std::to_string(job.server_threads) +
                           " must be 1..64");
  }
  if (job.transport != "auto" && job.transport != "tcp" && job.transport != "ucx" &&
      job.transport != "verbs") {
    return InvalidArgument("transport '" + job.transport + "' is not auto, verbs, ucx or tcp");
  }
  if (job.staging_bytes < (64u << 10)) return InvalidArgument("staging_bytes must be >= 64 KiB");
  if (job.arena_bytes < (64u << 10)) return InvalidArgument("arena_bytes must be >= 64 KiB");
  if (job.send_bytes < (64u << 10)) return InvalidArgument("send_bytes must be >= 64 KiB");
  if (job.max_keys_per_request == 0) return InvalidArgument("max_keys_per_request must be > 0");
  if (job.max_outstanding == 0 || job.max_outstanding > 4096) {
    return InvalidArgument("max_outstanding must be 1..4096");
  }
  if (!(job.push_filter >= 0.0f)) return InvalidArgument("push_filter must be >= 0");
  if (job.replicas == 0 || job.replicas > job.servers) {
    return InvalidArgument("replicas " + std::to_string(job.replicas) + " must be 1.." +
                           std::to_string(job.servers) +
                           " (the number of server ranks: a chain never keeps two copies of a "
                           "shard in one process)");
  }
  if (job.spares > 0) {
    if (job.replicas < 2) {
      return InvalidArgument("spares need replicas >= 2 (a spare re-creates a lost copy)");
    }
    if (job.server_threads != 1) {
      return InvalidArgument("spares need server_threads 1");
    }
    if (job.spares > 64) {
      return InvalidArgument("spares " + std::to_string(job.spares) + " must be 0..64");
    }
  }
  if (job.elastic && (job.spares > 0 || job.server_threads != 1)) {
    return InvalidArgument(
        "elastic jobs need spares 0 and server_threads 1 (a move plans whole server ranks)");
  }
  if (job.join_slots > 0 && !job.elastic) {
    return InvalidArgument("join slots need an elastic job (a joining server takes shards)");
  }
  if (job.join_slots > 64) {
    return InvalidArgument("join_slots " + std::to_string(job.join_slots) + " must be 0..64");
  }
  if (job.worker_join_slots > 0 && !job.elastic) {
    return InvalidArgument(
        "worker join slots need an elastic job (the job's workers change while it runs)");
  }
  if (job.worker_join_slots > 64) {
    return InvalidArgument("worker_join_slots " + std::to_string(job.worker_join_slots) +
                           " must be 0..64");
  }
  if (job.shards != 0) {
    if (job.shards < job.shard_servers() || job.shards > 65535) {
      return InvalidArgument("shards " + std::to_string(job.shards) + " must be " +
                             std::to_string(job.shard_servers()) +
                             "..65535 (at least one per shard server; 0: one per shard server)");
    }
    if (job.shards != job.shard_servers() && job.spares > 0) {
      return InvalidArgument("spares need one shard per shard server (shards 0) for now");
    }
  }
  // Replicas with admission or eviction: the chain's head decides and the chain carries its
  // decisions (row records, ps/server/server_records.cc), so replicas keep the head's rows.
  if (job.backup_workers > 0) {
    if (job.consistency.kind != Consistency::kBsp) {
      return InvalidArgument("backup workers need bsp consistency (under " +
                             ConsistencyName(job.consistency) + " no clock waits for a worker)");
    }
    if (job.backup_workers >= job.workers) {
      return InvalidArgument("backup_workers " + std::to_string(job.backup_workers) +
                             " must be less than the workers (" + std::to_string(job.workers) +
                             "): a clock needs at least one worker's pushes");
    }
  }
  if (job.peer_timeout.count() <= 0) return InvalidArgument("peer_timeout must be > 0");
  if (job.evict_tick.count() <= 0) return InvalidArgument("evict_tick must be > 0");
  if (job.checkpoint_every > 0) {
    if (job.checkpoint_dir.empty()) {
      return InvalidArgument("checkpoint_every is set but checkpoint_dir is empty");
    }
    if (job.consistency.kind != Consistency::kBsp) {
      // Only BSP has a clock boundary where every server holds exactly the same updates.
      return InvalidArgument("periodic checkpoints need bsp consistency (under " +
                             ConsistencyName(job.consistency) +
                             " no clock boundary is consistent across servers)");
    }
    if (job.checkpoints_kept == 0) return InvalidArgument("checkpoints_kept must be >= 1");
  } else if (!job.checkpoint_dir.empty()) {
    return InvalidArgument("checkpoint_dir is set but checkpoint_every is 0");
  }
  return Status::Ok();
}

ChainMap JobChains(const JobSpec& job) {
  ChainMap c(job.shard_servers(), job.replicas, job.spares + job.join_slots, job.num_shards());
  for (uint32_t j = 0; j < job.join_slots; ++j) c.MarkDead(job.first_join_slot() + j);
  return c;
}

int RanksNeeded(const JobSpec& job) {
  if (job.role_rule == RoleRule::kColocated) {
    return static_cast<int>(std::max(job.servers, job.workers) + job.spares + job.join_slots +
                            job.worker_join_slots);
  }
  return static_cast<int>(job.servers + job.workers + job.spares + job.join_slots +
                          job.worker_join_slots);
}

Result<RankRoles> RolesOf(const JobSpec& job, int rank, int size) {
  const int need = RanksNeeded(job);
  if (size != need) {
    return InvalidArgument(
        "the job has " + std::to_string(size) + " ranks but " + std::to_string(job.servers) +
        " servers and " + std::to_string(job.workers) + " workers under the " +
        std::string(RoleRuleName(job.role_rule)) + " rule need " + std::to_string(need) +
        " (start it with that many ranks, or pass --servers/--workers to match)");
  }
  if (rank < 0 || rank >= size) {
    return InvalidArgument("rank " + std::to_string(rank) + " outside 0.." +
                           std::to_string(size - 1));
  }
  RankRoles r;
  r.coordinator = rank == 0;
  const int s = static_cast<int>(job.servers);
  const int w = static_cast<int>(job.workers);
  // Worker join slots come last, server join slots before them, spares before those.
  const int worker_joins_at = need - static_cast<int>(job.worker_join_slots);
  if (rank >= worker_joins_at) {
    r.worker = w + (rank - worker_joins_at);
    r.worker_join = true;
    return r;
  }
  const int joins_at = worker_joins_at - static_cast<int>(job.join_slots);
  if (rank >= joins_at) {
    r.join = rank - joins_at;
    return r;
  }
  if (rank >= joins_at - static_cast<int>(job.spares)) {
    r.spare = rank - (joins_at - static_cast<int>(job.spares));
    return r;
  }
  if (job.role_rule == RoleRule::kColocated) {
    if (rank < s) r.server = rank;
    if (rank < w) r.worker = rank;
  } else if (rank < s) {
    r.server = rank;
  } else {
    r.worker = rank - s;
  }
  return r;
}

}  // namespace ferry::ps
