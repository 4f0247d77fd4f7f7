// Rebalancing plans for a change of membership (JobSpec::shards, docs/ps.md "Shards"): which
// shard copies move from which server to which when a server joins or leaves. With more shards
// than servers a membership change moves whole shards, each keeping its own push numbering, so
// the exactly-once rule of a chain holds across the move (a shard's copy is re-created by the
// repair path: the new member joins the chain at its tail with a copy from the live tail while
// pushes go on, then the old one leaves the chain).
//
// Pure and deterministic: every process that holds the same chains computes the same plan, and
// the tests check the plans alone (tests/ps/rebalance_test.cc).
//
//   join:  the joining server takes copies from the most loaded servers until it holds its share
//          (floor(copies / servers)), heads first until it heads its share of the shards;
//          nothing else moves, so about 1/(S+1) of the rows move (Rebalance.* measures it).
//   leave: each copy the leaving server holds goes to a live server that holds no copy of that
//          shard yet: head copies first, to the server heading fewest (heads are the serving
//          load), then the others to the server holding fewest. Only those copies move, so the
//          result can be uneven: a copy can only go to a server outside its chain (4 -> 3
//          servers with R 2: 16..24 heads and 40..44 copies each; rebalance_test.cc).
//
// Thread-safety: free functions over values.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace ferry::ps {

// A copy of `shard` moves from server `from` to server `to` (`to` takes `from`'s place in the
// chain: it heads the shard when `from` did).
struct ShardMove {
  uint32_t shard = 0;
  uint32_t from = 0;
  uint32_t to = 0;
  bool operator==(const ShardMove&) const = default;
};

// `chains[q]`: the live members of shard q's chain, head first (distinct servers). `live`: the
// live servers before the change (every member of a chain is one; a server may hold nothing).
// PlanJoin: `joining` is not in `live` and holds nothing. PlanLeave: `leaving` is in `live`;
// nullopt when no other live server can take one of its copies (a shard already on all of them).
std::vector<ShardMove> PlanJoin(std::span<const std::vector<uint32_t>> chains,
                                std::span<const uint32_t> live, uint32_t joining);
std::optional<std::vector<ShardMove>> PlanLeave(std::span<const std::vector<uint32_t>> chains,
                                                std::span<const uint32_t> live, uint32_t leaving);

// The chains after `moves` (each `from` replaced by its `to`, in place).
std::vector<std::vector<uint32_t>> ApplyMoves(std::span<const std::vector<uint32_t>> chains,
                                              std::span<const ShardMove> moves);

}  // namespace ferry::ps
