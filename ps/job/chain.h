// Chain replication of server shards (JobSpec::replicas, docs/ps.md "Replicas"): which servers
// hold a shard, which of them is its head (serves the workers) and which one a server forwards a
// push to. Pure bookkeeping, shared by the coordinator, the servers and the workers so that all
// three agree on the chains for the same set of dead servers.
//
// Shard s is the set of keys Partition assigns to server s. With R replicas it lives on the chain
//
//     s -> s+1 -> ... -> s+R-1        (server indices mod S; R <= S, so all distinct)
//
// Pushes enter at the head (the first live member), are applied there and forwarded member by
// member to the tail (the last live member); the tail's acknowledgement travels back, and the
// head answers the worker only then. Pulls are served by the head. Server i therefore hosts R
// shards: its own (position 0 of its chain) and the shards i-1, ..., i-R+1 as a backup
// ("hosted slot" k holds shard i-k). When a server dies, every chain it was in closes over the
// gap: its successor becomes the head of the shards it headed, its predecessor forwards to its
// successor. A job survives as long as every shard keeps one live member.
//
// Thread-safety: a value type; not synchronised.
#pragma once

#include <cstdint>
#include <vector>

namespace ferry::ps {

class ChainMap {
 public:
  ChainMap() = default;
  // Requires 1 <= replicas <= servers (ValidateJob checks it).
  ChainMap(uint32_t servers, uint32_t replicas);

  uint32_t servers() const { return servers_; }
  uint32_t replicas() const { return replicas_; }

  // The k-th member of shard's chain (k < replicas), dead or alive.
  uint32_t Member(uint32_t shard, uint32_t k) const { return (shard + k) % servers_; }
  // The shard in hosted slot k of `server` (the shard whose chain has `server` at position k).
  uint32_t HostedShard(uint32_t server, uint32_t k) const {
    return (server + servers_ - k % servers_) % servers_;
  }
  // Position of `server` in shard's chain, or -1 when it is not a member.
  int Position(uint32_t shard, uint32_t server) const;

  bool dead(uint32_t server) const { return dead_[server]; }
  void MarkDead(uint32_t server) { dead_[server] = true; }
  uint32_t live_servers() const;

  // The first live member of shard's chain, or -1 when none is left.
  int Head(uint32_t shard) const;
  // The next live member after `server` in shard's chain, or -1 when `server` is its live tail
  // (or not a member).
  int Successor(uint32_t shard, uint32_t server) const;
  // Every shard still has a live member (with `also_dead` dead too, when given).
  bool AllShardsLive(int also_dead = -1) const;

 private:
  uint32_t servers_ = 1;
  uint32_t replicas_ = 1;
  std::vector<bool> dead_ = std::vector<bool>(1, false);
};

}  // namespace ferry::ps
