// Rebalancing plans (ps/job/rebalance.h): a join moves about 1/(S+1) of the copies and rows, and
// only to the joining server; a leave moves exactly the leaving server's copies; every plan keeps
// one copy of a shard per server and the loads within one copy of each other.
#include "ps/job/rebalance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "ps/job/chain.h"
#include "ps/job/partition.h"
#include "tests/ps/chains_of.h"

namespace ferry::ps {
namespace {

std::vector<std::vector<uint32_t>> Chains(uint32_t servers, uint32_t replicas, uint32_t shards) {
  const ChainMap map(servers, replicas, 0, shards);
  std::vector<std::vector<uint32_t>> out;
  for (uint32_t q = 0; q < shards; ++q) out.emplace_back(map.Chain(q).begin(), map.Chain(q).end());
  return out;
}

std::vector<uint32_t> Range(uint32_t first, uint32_t end) {
  std::vector<uint32_t> v;
  for (uint32_t s = first; s < end; ++s) v.push_back(s);
  return v;
}

// Copies and heads per server (every server in `live` listed).
std::map<uint32_t, std::pair<uint32_t, uint32_t>> Loads(
    const std::vector<std::vector<uint32_t>>& chains, const std::vector<uint32_t>& live) {
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> load;
  for (uint32_t s : live) load[s];
  for (const auto& c : chains) {
    for (size_t k = 0; k < c.size(); ++k) {
      ++load[c[k]].first;
      if (k == 0) ++load[c[k]].second;
    }
  }
  return load;
}

void ExpectValid(const std::vector<std::vector<uint32_t>>& chains, size_t replicas) {
  for (size_t q = 0; q < chains.size(); ++q) {
    EXPECT_EQ(chains[q].size(), replicas) << "shard " << q;
    EXPECT_EQ(std::set<uint32_t>(chains[q].begin(), chains[q].end()).size(), chains[q].size())
        << "shard " << q << " has two copies on one server";
  }
}

void ExpectBalanced(const std::vector<std::vector<uint32_t>>& chains,
                    const std::vector<uint32_t>& live, uint32_t copy_slack, uint32_t head_slack) {
  uint32_t lo = UINT32_MAX, hi = 0, hlo = UINT32_MAX, hhi = 0;
  for (const auto& [s, l] : Loads(chains, live)) {
    lo = std::min(lo, l.first);
    hi = std::max(hi, l.first);
    hlo = std::min(hlo, l.second);
    hhi = std::max(hhi, l.second);
  }
  EXPECT_LE(hi - lo, copy_slack) << "copies per server " << lo << ".." << hi;
  EXPECT_LE(hhi - hlo, head_slack) << "heads per server " << hlo << ".." << hhi;
}

TEST(Rebalance, AJoinMovesAboutOneShareOfTheRowsToTheNewServerOnly) {
  for (auto [servers, replicas, shards] : {std::tuple{4u, 2u, 64u}, std::tuple{2u, 1u, 12u},
                                           std::tuple{3u, 3u, 31u}, std::tuple{8u, 2u, 256u}}) {
    SCOPED_TRACE(std::to_string(servers) + " servers, R " + std::to_string(replicas) + ", " +
                 std::to_string(shards) + " shards");
    const auto chains = Chains(servers, replicas, shards);
    const auto live = Range(0, servers);
    const std::vector<ShardMove> moves = PlanJoin(chains, live, servers);
    EXPECT_EQ(moves, PlanJoin(chains, live, servers)) << "not deterministic";
    const uint64_t copies = uint64_t{shards} * replicas;
    EXPECT_EQ(moves.size(), copies / (servers + 1));
    std::set<uint32_t> moved;
    for (const ShardMove& m : moves) {
      EXPECT_EQ(m.to, servers);
      EXPECT_TRUE(moved.insert(m.shard).second) << "shard " << m.shard << " moved twice";
    }
    const auto after = ApplyMoves(chains, moves);
    ExpectValid(after, replicas);
    const auto all = Range(0, servers + 1);
    ExpectBalanced(after, all, 1, 1);
    // The rows that move: each moved copy carries its shard's share of the key space.
    auto p = Partition::Create(shards);
    ASSERT_TRUE(p.ok());
    const std::vector<double> share = p->Shares();
    double rows = 0;
    for (const ShardMove& m : moves) rows += share[m.shard] / replicas;
    const double ideal = 1.0 / (servers + 1);
    std::printf(
        "[ info     ] server %u joins %u (R %u, %u shards): %zu of %llu copies "
        "move, %.3f of the rows (1/(S+1) = %.3f)\n",
        servers, servers, replicas, shards, moves.size(), static_cast<unsigned long long>(copies),
        rows, ideal);
    EXPECT_NEAR(rows, ideal, ideal * 0.35);
  }
}

TEST(Rebalance, ALeaveMovesExactlyTheLeavingServersCopies) {
  const auto chains = Chains(4, 2, 64);
  const auto live = Range(0, 4);
  const auto plan = PlanLeave(chains, live, 2);
  ASSERT_TRUE(plan.has_value());
  const std::vector<ShardMove>& moves = *plan;
  EXPECT_EQ(moves.size(), 32u);  // server 2 holds 16 shards it heads and 16 it follows
  for (const ShardMove& m : moves) {
    EXPECT_EQ(m.from, 2u);
    EXPECT_NE(m.to, 2u);
  }
  const auto after = ApplyMoves(chains, moves);
  ExpectValid(after, 2);
  const std::vector<uint32_t> rest = {0, 1, 3};
  EXPECT_EQ(Loads(after, live)[2].first, 0u);
  // Only server 2's copies move: its 16 head copies can go to servers 0 and 1 only (server 3
  // follows each of them) and its 16 others to 0 and 3, so the loads cannot come out even
  // (rebalance.h).
  ExpectBalanced(after, rest, 4, 8);
  // A join after a leave, and a leave of the joined server: every copy goes back to the others.
  const auto grown = ApplyMoves(chains, PlanJoin(chains, live, 4));
  const std::vector<uint32_t> five = {0, 1, 2, 3, 4};
  const auto back = PlanLeave(grown, five, 4);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->size(), 128u / 5);
  ExpectValid(ApplyMoves(grown, *back), 2);
  ExpectBalanced(ApplyMoves(grown, *back), live, 2, 2);
}

TEST(Rebalance, ALeaveNobodyCanTakeIsRefused) {
  // Three replicas on three servers: every shard is on every server already.
  EXPECT_FALSE(PlanLeave(Chains(3, 3, 9), Range(0, 3), 1).has_value());
  // A server that holds nothing leaves without a move.
  const auto none = PlanLeave(Chains(2, 1, 4), Range(0, 3), 2);
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->empty());
}

// The chains a ChainMap holds, head first.
// Every server's slots name exactly the shards whose chains hold it, once each.
void ExpectSlotsMatchChains(const ChainMap& map) {
  for (uint32_t m = 0; m < map.members(); ++m) {
    for (uint32_t q = 0; q < map.shards(); ++q) {
      const bool member = map.Position(q, m) >= 0;
      EXPECT_EQ(map.Slot(m, q) >= 0, member) << "server " << m << ", shard " << q;
      EXPECT_EQ(std::count(map.Hosted(m).begin(), map.Hosted(m).end(), q), member ? 1 : 0)
          << "server " << m << ", shard " << q;
    }
  }
}

// Carries `moves` out on `map` (chain.h: BeginMove, then FinishMove), `batch` moves begun at a
// time, checking after every step that each chain holds a server once and every shard a complete
// copy.
void CarryOut(ChainMap& map, const std::vector<ShardMove>& moves, size_t batch) {
  for (size_t i = 0; i < moves.size(); i += batch) {
    const size_t end = std::min(moves.size(), i + batch);
    for (size_t j = i; j < end; ++j) {
      ASSERT_TRUE(map.BeginMove(moves[j].shard, moves[j].from, moves[j].to)) << j;
    }
    EXPECT_TRUE(map.AllShardsLive());
    ExpectSlotsMatchChains(map);
    for (size_t j = i; j < end; ++j) {
      ASSERT_TRUE(map.FinishMove(moves[j].shard, moves[j].from, moves[j].to)) << j;
    }
    EXPECT_TRUE(map.AllShardsLive());
    ExpectSlotsMatchChains(map);
    for (const auto& chain : ChainsOf(map)) {
      EXPECT_EQ(std::set<uint32_t>(chain.begin(), chain.end()).size(), chain.size());
    }
  }
}

// A join's and then a leave's plan carried out move by move on the chains every process holds
// (one at a time, and all begun before any finishes) end at the chains the plan promised.
TEST(Rebalance, PlansCarriedOutOnTheChainMapEndWhereApplyMovesSays) {
  for (auto [servers, replicas, shards] :
       {std::tuple{2u, 1u, 12u}, std::tuple{3u, 2u, 31u}, std::tuple{4u, 2u, 64u}}) {
    for (size_t batch : {size_t{1}, size_t{1000}}) {
      SCOPED_TRACE(std::to_string(servers) + " servers, R " + std::to_string(replicas) + ", " +
                   std::to_string(shards) + " shards, " + std::to_string(batch) + " at a time");
      ChainMap map(servers, replicas, 1, shards);  // member `servers`: the one that joins
      const auto joins = PlanJoin(ChainsOf(map), Range(0, servers), servers);
      const auto joined = ApplyMoves(ChainsOf(map), joins);
      CarryOut(map, joins, batch);
      EXPECT_EQ(ChainsOf(map), joined);
      // Server 1 leaves the grown job.
      std::vector<uint32_t> live = Range(0, servers + 1);
      const auto leaves = PlanLeave(ChainsOf(map), live, 1);
      ASSERT_TRUE(leaves.has_value());
      const auto left = ApplyMoves(ChainsOf(map), *leaves);
      CarryOut(map, *leaves, batch);
      EXPECT_EQ(ChainsOf(map), left);
      for (uint32_t q = 0; q < shards; ++q) EXPECT_EQ(map.Slot(1, q), -1) << q;
      ExpectValid(left, replicas);
    }
  }
}

}  // namespace
}  // namespace ferry::ps
