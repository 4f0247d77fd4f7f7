// Sequencing a rebalance (ps/coordinator/move_plan.h): every move goes begin -> copied -> drain
// -> drained -> finish, a server receives and sends one copy at a time, a shard moves once at a
// time, the chains end where the plan said, and failures restart, hand over or skip moves.
#include "ps/coordinator/move_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "ps/job/chain.h"
#include "ps/job/rebalance.h"
#include "tests/ps/chains_of.h"

namespace ferry::ps {
namespace {

using Step = MovePlan::Step;

std::vector<uint32_t> Live(const ChainMap& map) {
  std::vector<uint32_t> live;
  for (uint32_t s = 0; s < map.members(); ++s) {
    if (!map.dead(s)) live.push_back(s);
  }
  return live;
}

// Drives `plan` to the end as the coordinator would, answering every begin with the target's
// copied report and every drain with the head's drained report one round later; checks the
// order of each move's steps and the limits after every round.
struct Driven {
  int rounds = 0;
  size_t most_begun = 0;  // the most copies begun in one round
};
Driven Drive(MovePlan& plan, ChainMap& chains) {
  std::map<uint32_t, int> step;  // shard -> 1 begun, 2 draining, 3 finished
  std::set<uint32_t> copying, draining;
  Driven d;
  while (!plan.done() && d.rounds < 10000) {
    ++d.rounds;
    std::map<uint32_t, int> sends, receives;
    for (const MovePlan::Action& a : plan.Next(chains)) {
      const uint32_t q = a.move.shard;
      switch (a.step) {
        case Step::kBegin:
          EXPECT_EQ(step[q], 0) << "shard " << q << " begun twice";
          EXPECT_EQ(static_cast<int>(a.server), chains.Tail(q)) << "not copied from the tail";
          EXPECT_TRUE(chains.copying(q, a.move.to));
          step[q] = 1;
          copying.insert(q);
          break;
        case Step::kDrain:
          EXPECT_EQ(step[q], 1) << "shard " << q << " drained before its copy";
          EXPECT_EQ(static_cast<int>(a.server), chains.Head(q));
          step[q] = 2;
          draining.insert(q);
          break;
        case Step::kFinish:
          EXPECT_EQ(step[q], 2) << "shard " << q << " finished before it drained";
          EXPECT_EQ(chains.Position(q, a.move.from), -1);
          EXPECT_GE(chains.Position(q, a.move.to), 0);
          step[q] = 3;
          break;
        case Step::kSkip:
          ADD_FAILURE() << "shard " << q << " skipped without a failure";
          break;
      }
    }
    // The limits, over the copies in progress after this round.
    for (uint32_t q : copying) {
      for (uint32_t m : chains.Chain(q)) {
        if (chains.copying(q, m)) {
          ++receives[m];
        }
      }
      ++sends[static_cast<uint32_t>(chains.Tail(q))];
    }
    for (const auto& [s, n] : receives) EXPECT_LE(n, 1) << "server " << s << " receives " << n;
    for (const auto& [s, n] : sends) EXPECT_LE(n, 1) << "server " << s << " sends " << n;
    // The reports come back (for what began this round: next round's Next sees them).
    for (uint32_t q : copying) {
      for (uint32_t m : chains.Chain(q)) {
        if (chains.copying(q, m)) {
          EXPECT_TRUE(plan.Copied(q, m).ok());
        }
      }
    }
    d.most_begun = std::max(d.most_begun, copying.size());
    copying.clear();
    for (uint32_t q : draining) EXPECT_TRUE(plan.Drained(q).ok());
    draining.clear();
  }
  for (const auto& [q, s] : step) EXPECT_EQ(s, 3) << "shard " << q;
  return d;
}

TEST(MovePlan, AJoinCopiesOneShardAtATimeIntoTheNewServerAndEndsAsPlanned) {
  ChainMap chains(3, 2, 1, 24);  // member 3 joins
  const auto before = ChainsOf(chains);
  const auto moves = PlanJoin(before, std::vector<uint32_t>{0, 1, 2}, 3);
  ASSERT_EQ(moves.size(), 12u);
  MovePlan plan(moves, chains.members());
  const Driven d = Drive(plan, chains);
  EXPECT_TRUE(plan.done());
  EXPECT_EQ(plan.finished(), moves.size());
  EXPECT_EQ(ChainsOf(chains), ApplyMoves(before, moves));
  // One copy into server 3 at a time: a begin, its copy and its drain per move, overlapping
  // the next move's copy with the last one's drain and finish.
  EXPECT_GE(d.rounds, static_cast<int>(moves.size()));
  EXPECT_EQ(d.most_begun, 1u);
}

TEST(MovePlan, ALeaveRunsCopiesToDifferentServersAtOnce) {
  ChainMap chains(4, 2, 0, 16);
  const auto before = ChainsOf(chains);
  const auto moves = PlanLeave(before, Live(chains), 1);
  ASSERT_TRUE(moves.has_value());
  MovePlan plan(*moves, chains.members());
  // Drive checks that no server receives or sends two copies at once.
  EXPECT_GE(Drive(plan, chains).most_begun, 2u) << "copies between different servers waited";
  EXPECT_EQ(plan.finished(), moves->size());
  EXPECT_EQ(ChainsOf(chains), ApplyMoves(before, *moves));
  for (uint32_t q = 0; q < 16; ++q) EXPECT_EQ(chains.Slot(1, q), -1) << q;
}

TEST(MovePlan, ReportsOutOfTurnAreRefused) {
  ChainMap chains(2, 1, 1, 4);
  MovePlan plan(PlanJoin(ChainsOf(chains), std::vector<uint32_t>{0, 1}, 2), chains.members());
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_FALSE(plan.Drained(0).ok());  // nothing draining
  const auto begun = plan.Next(chains);
  ASSERT_EQ(begun.size(), 1u);
  const ShardMove m = begun[0].move;
  EXPECT_FALSE(plan.Copied(m.shard, m.from).ok());  // not the target
  EXPECT_FALSE(plan.Drained(m.shard).ok());         // still copying
  ASSERT_TRUE(plan.Copied(m.shard, m.to).ok());
  EXPECT_FALSE(plan.Copied(m.shard, m.to).ok());  // twice
  const auto drain = plan.Next(chains);
  ASSERT_EQ(drain.size(), 1u);
  EXPECT_EQ(drain[0].step, Step::kDrain);
  EXPECT_EQ(drain[0].server, m.from);  // R = 1: the source heads the shard
  EXPECT_TRUE(plan.Next(chains).empty()) << "finished before it drained";
  ASSERT_TRUE(plan.Drained(m.shard).ok());
  const auto finish = plan.Next(chains);
  ASSERT_EQ(finish.size(), 1u);
  EXPECT_EQ(finish[0].step, Step::kFinish);
  EXPECT_EQ(finish[0].server, m.to);  // the new head
  EXPECT_TRUE(plan.done());
}

TEST(MovePlan, FailuresRestartHandOverOrSkipMoves) {
  // R = 2 on 3 servers, 6 shards; server 3 joins. Shard moves begin one at a time into 3.
  ChainMap chains(3, 2, 1, 6);
  const auto moves = PlanJoin(ChainsOf(chains), std::vector<uint32_t>{0, 1, 2}, 3);
  ASSERT_GE(moves.size(), 2u);
  MovePlan plan(moves, chains.members());
  auto begun = plan.Next(chains);
  ASSERT_EQ(begun.size(), 1u);
  const ShardMove m = begun[0].move;
  const uint32_t source = begun[0].server;
  // The source dies mid-copy: the copy starts again from the new tail.
  chains.MarkDead(source);
  const auto restarted = plan.Failed(source, chains);
  ASSERT_EQ(restarted.size(), 1u);
  EXPECT_EQ(restarted[0].step, Step::kBegin);
  EXPECT_EQ(static_cast<int>(restarted[0].server), chains.Tail(m.shard));
  EXPECT_NE(restarted[0].server, source);
  // The target dies: the move and every pending move into it are skipped.
  chains.MarkDead(3);
  const auto skipped = plan.Failed(3, chains);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].step, Step::kSkip);
  for (const auto& a : plan.Next(chains)) EXPECT_EQ(a.step, Step::kSkip);
  EXPECT_TRUE(plan.done());
  EXPECT_EQ(plan.finished(), 0u);
  EXPECT_EQ(plan.skipped(), moves.size());
  EXPECT_TRUE(chains.AllShardsLive());
}

TEST(MovePlan, ADeadHeadHandsTheDrainToTheNext) {
  ChainMap chains(3, 2, 1, 3);  // shard q on q, q+1
  MovePlan plan({ShardMove{0, 0, 3}}, chains.members());
  ASSERT_EQ(plan.Next(chains).size(), 1u);
  ASSERT_TRUE(plan.Copied(0, 3).ok());
  const auto drain = plan.Next(chains);
  ASSERT_EQ(drain.size(), 1u);
  EXPECT_EQ(drain[0].server, 0u);
  chains.MarkDead(0);
  const auto handed = plan.Failed(0, chains);
  ASSERT_EQ(handed.size(), 1u);
  EXPECT_EQ(handed[0].step, Step::kDrain);
  EXPECT_EQ(handed[0].server, 1u);
  ASSERT_TRUE(plan.Drained(0).ok());
  const auto finish = plan.Next(chains);
  ASSERT_EQ(finish.size(), 1u);
  EXPECT_EQ(finish[0].step, Step::kFinish);
  // 3 takes the dead source's place, in front of 1: it heads the shard.
  EXPECT_EQ(std::vector<uint32_t>(chains.Chain(0).begin(), chains.Chain(0).end()),
            (std::vector<uint32_t>{3, 1}));
  EXPECT_EQ(chains.Head(0), 3);
}

TEST(MovePlan, ARestartOntoABusySourceKeepsItsOtherMovesWaitingForBoth) {
  ChainMap chains(5, 2, 0, 10);  // shard q on q mod 5, q+1 mod 5
  // A: shard 0 [0, 1] to 3, copied by 1. B: shard 1 [1, 2] to 0, copied by 2. C: shard 5
  // [0, 1] to 4, copied by 1 too: it waits for A.
  MovePlan plan({ShardMove{0, 0, 3}, ShardMove{1, 2, 0}, ShardMove{5, 0, 4}}, chains.members());
  const auto begun = plan.Next(chains);
  ASSERT_EQ(begun.size(), 2u);
  EXPECT_EQ(begun[0].server, 1u);
  EXPECT_EQ(begun[1].server, 2u);
  // B's source dies: B starts again from shard 1's new tail, server 1, busy with A.
  chains.MarkDead(2);
  const auto restarted = plan.Failed(2, chains);
  ASSERT_EQ(restarted.size(), 1u);
  EXPECT_EQ(restarted[0].step, Step::kBegin);
  EXPECT_EQ(restarted[0].server, 1u);
  // A's copy is done; server 1 still sends B's: C waits.
  ASSERT_TRUE(plan.Copied(0, 3).ok());
  const auto after_a = plan.Next(chains);
  ASSERT_EQ(after_a.size(), 1u);
  EXPECT_EQ(after_a[0].step, Step::kDrain);
  ASSERT_TRUE(plan.Copied(1, 0).ok());
  const auto after_b = plan.Next(chains);
  ASSERT_EQ(after_b.size(), 2u);
  EXPECT_EQ(after_b[0].step, Step::kDrain);
  EXPECT_EQ(after_b[1].step, Step::kBegin);
  EXPECT_EQ(after_b[1].move.shard, 5u);
  EXPECT_EQ(after_b[1].server, 1u);
}

// A joining server learns the chains as bytes (kMembership): the same map comes back, after
// moves and deaths too, and malformed bytes leave the map as it was.
TEST(ChainMapBytes, RoundTripsAndRefusesMalformed) {
  ChainMap chains(3, 2, 1, 12);
  chains.MarkDead(3);  // a join slot
  ASSERT_TRUE(chains.BeginMove(0, 0, 2));
  ASSERT_TRUE(chains.FinishMove(0, 0, 2));
  ASSERT_TRUE(chains.BeginMove(4, 1, 0));  // one still copying
  chains.MarkDead(1);
  const std::vector<uint8_t> bytes = chains.Encode();
  ChainMap back;
  ASSERT_TRUE(back.Decode(bytes));
  EXPECT_TRUE(back == chains);
  EXPECT_EQ(back.version(), chains.version());
  EXPECT_EQ(ChainsOf(back), ChainsOf(chains));
  const ChainMap before = back;
  for (size_t cut : {size_t{0}, size_t{3}, size_t{4}, bytes.size() / 2, bytes.size() - 4}) {
    EXPECT_FALSE(back.Decode(std::span(bytes).first(cut))) << "cut at " << cut;
  }
  std::vector<uint8_t> bad = bytes;
  bad.push_back(0);
  bad.push_back(0);
  bad.push_back(0);
  bad.push_back(0);
  EXPECT_FALSE(back.Decode(bad)) << "trailing bytes";
  bad = bytes;
  bad[20 + 4] = 99;  // shard 0's first member: no such server
  EXPECT_FALSE(back.Decode(bad));
  EXPECT_TRUE(back == before);
}

// A join slot (a dead member that holds nothing) comes alive once; a server that held shards
// and died or left does not.
TEST(ChainMapRevive, OnlyAnEmptyDeadMemberRevives) {
  ChainMap chains(2, 1, 1, 6);
  chains.MarkDead(2);
  EXPECT_FALSE(chains.BeginMove(0, 0, 2)) << "a dead join slot takes no move";
  EXPECT_TRUE(chains.Revive(2));
  EXPECT_FALSE(chains.Revive(2)) << "alive already";
  EXPECT_TRUE(chains.BeginMove(0, 0, 2));
  chains.MarkDead(1);
  EXPECT_FALSE(chains.Revive(1)) << "it held shards";
}

}  // namespace
}  // namespace ferry::ps
