// Chain replication of server shards (JobSpec::replicas, docs/ps.md "Replicas"): which servers
// hold a shard, which of them is its head (serves the workers) and which one a server forwards a
// push to. Pure bookkeeping, shared by the coordinator, the servers and the workers so that all
// three agree on the chains for the same sequence of removals and repairs.
//
// Shard q is the set of keys Partition assigns to q (JobSpec::num_shards() Q of them, at least
// one per server: Q = S unless JobSpec::shards says more). With R replicas it starts on the chain
//
//     q mod S -> q+1 mod S -> ... -> q+R-1 mod S      (server indices; R <= S, so all distinct)
//
// Pushes enter at the head (the first live member), are applied there and forwarded member by
// member to the tail (the last live member); the tail's acknowledgement travels back, and the
// head answers the worker only then. Pulls are served by the head. Server i therefore hosts R
// shards: its own and the shards i-1, ..., i-R+1 as a backup ("hosted slot" k holds shard i-k;
// the slot indexes the server's tables, the position in a chain is where the server stands in
// it). When a server dies, every chain it was in closes over the gap: its successor becomes the
// head of the shards it headed, its predecessor forwards to its successor. A job survives as
// long as every shard keeps one live member. With Q > S server i hosts R * Q / S shards (about):
// hosted slot order is by distance k first (the shards starting on i, then those starting on
// i-1, ...), by shard within a distance, so slot 0 is shard i and Q = S lays slots out as above.
//
// Repairs (JobSpec::spares; servers S .. S+N-1 are spares, hosting nothing at the start): a
// spare adopts a dead server's hosted slots (the same shards in the same slots) and is appended
// at the tail of each of those chains. Until Joined() it is *joining*: the live tail before it
// (the source, Tail()) forwards to it, but it heads nothing and does not keep a shard alive
// (its copy is not complete). Chains only ever grow at the tail, so the members before a joining
// spare keep their positions.
//
// Queries about a shard >= shards() (a spare's table before it adopts) or a server >= members()
// answer -1 (no member, no slot); the accessors returning indices require valid ones.
//
// Thread-safety: a value type; not synchronised.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace ferry::ps {

class ChainMap {
 public:
  ChainMap() = default;
  // Requires 1 <= replicas <= servers <= shards (ValidateJob checks it); shards 0: servers.
  ChainMap(uint32_t servers, uint32_t replicas, uint32_t spares = 0, uint32_t shards = 0);

  uint32_t servers() const { return servers_; }  // shard servers S (spares not counted)
  uint32_t shards() const { return shards_; }    // Q >= S
  uint32_t spares() const { return spares_; }
  uint32_t replicas() const { return replicas_; }
  // Every server index, spares included, is below this.
  uint32_t members() const { return servers_ + spares_; }
  // The repairs and moves begun or finished so far (Join, BeginMove, FinishMove that succeeded).
  uint32_t version() const { return version_; }

  // Shard's chain in order, dead and joining members included.
  std::span<const uint32_t> Chain(uint32_t shard) const { return order_[shard]; }
  // The k-th member of shard's chain (k < Chain(shard).size()), dead or alive.
  uint32_t Member(uint32_t shard, uint32_t k) const { return order_[shard][k]; }
  // The shard in hosted slot k of `server` (k < Hosted(server).size()).
  uint32_t HostedShard(uint32_t server, uint32_t k) const { return hosted_[server][k]; }
  std::span<const uint32_t> Hosted(uint32_t server) const { return hosted_[server]; }
  // The hosted slot of `shard` on `server`, or -1 when it holds no copy.
  int Slot(uint32_t server, uint32_t shard) const;
  // Position of `server` in shard's chain, or -1 when it is not a member.
  int Position(uint32_t shard, uint32_t server) const;

  bool dead(uint32_t server) const { return dead_[server]; }
  void MarkDead(uint32_t server) { dead_[server] = true; }
  // A join slot (JobSpec::join_slots: members counted as spares here, dead until they join)
  // comes alive: it holds nothing and is in no chain, so nothing routes to it until a move
  // (BeginMove) makes it a target. False (nothing changed) unless `server` is a dead member that
  // hosts nothing and was never adopted.
  bool Revive(uint32_t server);
  bool joining(uint32_t server) const { return joining_[server]; }
  bool is_spare(uint32_t server) const { return server >= servers_; }
  // Live shard servers and adopted spares (idle spares not counted).
  uint32_t live_servers() const;

  // The first live member of shard's chain that is not joining, or -1 when none is left.
  int Head(uint32_t shard) const;
  // The last live member that is not joining (the source of a repair), or -1.
  int Tail(uint32_t shard) const;
  // The next live member after `server` in shard's chain (a joining one included), or -1 when
  // `server` is its live tail (or not a member).
  int Successor(uint32_t shard, uint32_t server) const;
  // Every shard still has a live member that is not joining (with `also_dead` dead too, when
  // given).
  bool AllShardsLive(int also_dead = -1) const;

  // The first live spare that hosts nothing, or -1.
  int IdleSpare() const;
  // Repair: the idle live spare `spare` adopts dead server `dead`'s hosted slots and joins the
  // tail of each of those chains. False (nothing changed) unless `dead` is dead, hosts shards
  // and was not adopted yet, and `spare` is a live idle spare.
  bool Join(uint32_t dead, uint32_t spare);
  // The spare's copies are complete: it may head and keeps its shards alive from now on.
  void Joined(uint32_t spare) { joining_[spare] = false; }
  // Moves (JobSpec::shards > S; ps/job/rebalance.h: a ShardMove carried out). BeginMove: `to`, a
  // live server outside shard's chain, joins it at the tail as a copying member of that shard
  // only (in the first slot a finished move left, else a new one at the end of its list, so a
  // server never has more slots than the job has shards): forwarded to, never a head, keeps nothing
  // alive, like a joining spare; the live tail copies it the shard. FinishMove: its copy is
  // complete and `to` takes `from`'s place in the chain (heading the shard when `from` did;
  // ApplyMoves' result); `from` keeps its slot, which no longer names the shard (Slot() -1,
  // HostedShard() kLeft). Reordering a chain is only sound while nothing is in flight along it:
  // the servers finish a move with the shard drained (its head holds new pushes back until the
  // tail acknowledged every accepted one, so every member holds the same rows). False (nothing
  // changed) when the move does not apply. Both count in version().
  static constexpr uint32_t kLeft = ~uint32_t{0};
  bool BeginMove(uint32_t shard, uint32_t from, uint32_t to);
  bool FinishMove(uint32_t shard, uint32_t from, uint32_t to);
  // Whether `server` is copying `shard` (a move begun, not finished).
  bool copying(uint32_t shard, uint32_t server) const;

  // Brings a fresh map to the state of one that saw these events (a standby coordinator rebuilds
  // it from what the members heard, control_journal.h): each repair (dead, spare) in order, its
  // dead server marked dead just before it, then every server in `down` dead, then the spares
  // in `joined` joined. A repair that does not apply is skipped (false returned).
  // The whole map as bytes, and back (a joining server gets the chains as the others hold them,
  // ControlKind::kMembership). Decode returns false on malformed bytes (the map is unchanged).
  std::vector<uint8_t> Encode() const;
  bool Decode(std::span<const uint8_t> bytes);

  bool Replay(std::span<const uint32_t> down,
              std::span<const std::pair<uint32_t, uint32_t>> repairs,
              std::span<const uint32_t> joined);

  bool operator==(const ChainMap&) const = default;

 private:
  uint32_t servers_ = 1;
  uint32_t shards_ = 1;
  uint32_t replicas_ = 1;
  uint32_t spares_ = 0;
  uint32_t version_ = 0;
  std::vector<std::vector<uint32_t>> order_ = {{0}};   // [shard]: the chain
  std::vector<std::vector<uint32_t>> hosted_ = {{0}};  // [server]: slot -> shard
  std::vector<bool> dead_ = std::vector<bool>(1, false);
  std::vector<bool> joining_ = std::vector<bool>(1, false);
  std::vector<bool> adopted_ = std::vector<bool>(1, false);  // a dead server's slots were taken
  std::vector<std::pair<uint32_t, uint32_t>> copying_;       // (shard, server): moves begun
  // A member that holds no complete copy of `shard` (a joining spare, or a move's target).
  bool Incomplete(uint32_t shard, uint32_t server) const {
    return joining_[server] || (!copying_.empty() && copying(shard, server));
  }
};

}  // namespace ferry::ps
