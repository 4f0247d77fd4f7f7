// A member's control journal (ps/wire/control_journal.h): what it keeps of what it sent and heard,
// the rejoin message it makes of that, and the standby's decoding of it (malformed input is a
// kProtocol error, never a crash), and the chains a standby rebuilds from the repairs it heard.
#include "ps/wire/control_journal.h"

#include <gtest/gtest.h>

#include <random>

#include "ps/job/chain.h"

namespace ferry::ps {
namespace {

ControlMessage Msg(ControlKind kind, uint64_t value = 0, uint64_t value2 = 0, uint32_t rank = 0) {
  ControlMessage m;
  m.kind = kind;
  m.value = value;
  m.value2 = value2;
  m.rank = rank;
  return m;
}

// Worker 1 (rank 4) of a job of 3 servers and 2 workers, some way into it.
ControlJournal WorkerJournal() {
  ControlJournal j;
  ControlMessage reg = Msg(ControlKind::kRegister, /*fingerprint=*/77);
  reg.rank = 4;
  reg.role = Role::kWorker;
  reg.index = 1;
  j.Sent(reg);
  ControlMessage mem = Msg(ControlKind::kMembership);
  for (uint32_t s = 0; s < 3; ++s) mem.members.push_back({s, Role::kServer, s, "a", "h", 10 + s});
  for (uint32_t w = 0; w < 2; ++w) mem.members.push_back({3 + w, Role::kWorker, w, "", "h", 20});
  mem.text = "127.0.0.1:9";
  j.Heard(mem);
  j.Heard(Msg(ControlKind::kStart));
  j.Sent(Msg(ControlKind::kClock, 3, 30, kClockCheckpoint));
  j.Sent(Msg(ControlKind::kClock, 2, 20));  // older: kept out
  j.Heard(Msg(ControlKind::kClockUpdate, 2));
  j.Heard(Msg(ControlKind::kClockUpdate, 1));
  j.Sent(Msg(ControlKind::kBarrier, 1));
  j.Heard(Msg(ControlKind::kBarrierRelease, 1));
  j.Sent(Msg(ControlKind::kBarrier, 2));
  for (uint64_t id = 1; id <= 6; ++id) {
    for (uint32_t off : {0u, 100u}) {
      ControlMessage g = Msg(ControlKind::kGather, id, 200);
      g.index = off;
      j.Sent(g);
    }
  }
  j.Sent(Msg(ControlKind::kCheckpoint, 7));
  j.Sent(Msg(ControlKind::kCheckpoint, 8));
  j.Heard(Msg(ControlKind::kCheckpointDone, 7));
  ControlMessage down = Msg(ControlKind::kServerDown);
  down.index = 2;
  j.Heard(down);
  ControlMessage apply = Msg(ControlKind::kApplyClock, 3);
  const uint32_t without[] = {0};
  apply.data = EncodeWorkerSet(without);
  j.Heard(apply);
  return j;
}

TEST(ControlJournal, KeepsTheNewestOfWhatWasSentAndHeard) {
  const ControlJournal j = WorkerJournal();
  EXPECT_EQ(j.rank, 4u);
  EXPECT_EQ(j.role, Role::kWorker);
  EXPECT_EQ(j.index, 1u);
  EXPECT_EQ(j.fingerprint, 77u);
  EXPECT_EQ(j.standby, "127.0.0.1:9");
  EXPECT_EQ(j.membership.size(), 5u);
  EXPECT_TRUE(j.started);
  EXPECT_FALSE(j.shutdown);
  EXPECT_FALSE(j.finished);
  EXPECT_EQ(j.clock, 3u);
  EXPECT_EQ(j.position, 30u);
  EXPECT_TRUE(j.clock_checkpoint);
  EXPECT_EQ(j.min_clock, 2u);
  EXPECT_EQ(j.barrier_sent, 2u);
  EXPECT_EQ(j.barrier_released, 1u);
  EXPECT_EQ(j.apply_clock, 3u);
  EXPECT_EQ(j.servers_down, std::set<uint32_t>{2});
  // The replay: every part of the newest kReplayGathers gathers, then the unanswered checkpoint.
  std::vector<std::pair<uint64_t, uint32_t>> gathers;
  std::vector<uint64_t> checkpoints;
  for (const ControlMessage& m : j.replay) {
    if (m.kind == ControlKind::kGather) gathers.emplace_back(m.value, m.index);
    if (m.kind == ControlKind::kCheckpoint) checkpoints.push_back(m.value);
  }
  ASSERT_EQ(gathers.size(), 2 * ControlJournal::kReplayGathers);
  EXPECT_EQ(gathers.front(), std::make_pair(uint64_t{7 - ControlJournal::kReplayGathers}, 0u));
  EXPECT_EQ(gathers.back(), std::make_pair(uint64_t{6}, 100u));
  EXPECT_EQ(checkpoints, std::vector<uint64_t>{8});
}

TEST(ControlJournal, RejoinCarriesItAndDecodesToTheSame) {
  const ControlJournal j = WorkerJournal();
  const ControlMessage m = j.Rejoin();
  EXPECT_EQ(m.kind, ControlKind::kRejoin);
  // Through the wire and back.
  auto wire = DecodeControl(EncodeControl(m));
  ASSERT_TRUE(wire.ok()) << wire.status().ToString();
  auto d = DecodeRejoin(*wire, 3, 2);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->rank, j.rank);
  EXPECT_EQ(d->role, j.role);
  EXPECT_EQ(d->index, j.index);
  EXPECT_EQ(d->fingerprint, j.fingerprint);
  EXPECT_EQ(d->membership, j.membership);
  EXPECT_EQ(d->started, j.started);
  EXPECT_EQ(d->clock, j.clock);
  EXPECT_EQ(d->position, j.position);
  EXPECT_EQ(d->clock_checkpoint, j.clock_checkpoint);
  EXPECT_EQ(d->min_clock, j.min_clock);
  EXPECT_EQ(d->barrier_sent, j.barrier_sent);
  EXPECT_EQ(d->barrier_released, j.barrier_released);
  EXPECT_EQ(d->apply_clock, j.apply_clock);
  EXPECT_EQ(d->apply_without, j.apply_without);
  EXPECT_EQ(d->servers_down, j.servers_down);
  EXPECT_EQ(EncodeJournal(*d), m.data);
}

TEST(ControlJournal, CoversWhatTheRejoinStandsForOnly) {
  for (ControlKind k :
       {ControlKind::kClock, ControlKind::kBarrier, ControlKind::kGather, ControlKind::kFinish,
        ControlKind::kCheckpoint, ControlKind::kClockApplied, ControlKind::kCheckpointDone}) {
    EXPECT_TRUE(ControlJournal::Covers(k)) << ControlKindName(k);
  }
  // What a member saw must still reach the new coordinator.
  EXPECT_FALSE(ControlJournal::Covers(ControlKind::kSuspect));
  EXPECT_FALSE(ControlJournal::Covers(ControlKind::kFailure));
}

TEST(ControlJournal, MalformedRejoinsAreProtocolErrors) {
  const ControlMessage good = WorkerJournal().Rejoin();
  ASSERT_TRUE(DecodeRejoin(good, 3, 2).ok());
  auto refused = [](const ControlMessage& m, uint32_t servers = 3, uint32_t workers = 2) {
    return DecodeRejoin(m, servers, workers).status().code() == Code::kProtocol;
  };
  ControlMessage m = good;
  m.kind = ControlKind::kRegister;
  EXPECT_TRUE(refused(m));
  for (size_t n = 0; n < good.data.size(); ++n) {  // every truncation
    m = good;
    m.data.resize(n);
    EXPECT_TRUE(refused(m)) << n;
  }
  m = good;
  m.data.push_back(0);  // a trailing byte
  EXPECT_TRUE(refused(m));
  EXPECT_TRUE(refused(good, 2, 2));  // server 2 down in a job of 2 servers
  EXPECT_TRUE(refused(good, 3, 1));  // worker 1 rejoins a job of 1 worker
  m = good;
  m.index = 0;  // worker 0 is rank 3, not 4: the member is not in its own membership
  EXPECT_TRUE(refused(m));
  m = good;
  m.data[0] |= 0x80;  // an unknown flag
  EXPECT_TRUE(refused(m));
  // Damage anywhere never crashes; what is read encodes back to the same bytes.
  std::mt19937 rng(5);
  for (int i = 0; i < 5000; ++i) {
    m = good;
    m.data[rng() % m.data.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    auto d = DecodeRejoin(m, 3, 2);
    if (d.ok()) {
      EXPECT_EQ(EncodeJournal(*d), m.data);
    } else {
      EXPECT_EQ(d.status().code(), Code::kProtocol);
    }
  }
}

// Repairs: server 1 went down, spare 3 adopted its slots and joined, then spare 3 went down and
// spare 4 adopted them (a job of 3 servers and 2 spares: server members 0..4).
TEST(ControlJournal, RepairsRoundTripInTheirOrderAndBadOnesAreRefused) {
  ControlJournal j = WorkerJournal();
  const auto heard = [&j](ControlKind kind, uint32_t index, uint64_t value = 0) {
    ControlMessage m = Msg(kind, value);
    m.index = index;
    j.Heard(m);
  };
  heard(ControlKind::kServerDown, 1);
  heard(ControlKind::kChainRepair, 1, 3);
  heard(ControlKind::kChainJoined, 3);
  heard(ControlKind::kServerDown, 3);
  heard(ControlKind::kChainRepair, 3, 4);
  const std::vector<std::pair<uint32_t, uint32_t>> repairs = {{1, 3}, {3, 4}};
  EXPECT_EQ(j.repairs, repairs);
  EXPECT_EQ(j.joined, std::set<uint32_t>{3});
  const ControlMessage m = j.Rejoin();
  auto d = DecodeRejoin(m, 5, 2);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->repairs, repairs);
  EXPECT_EQ(d->joined, j.joined);
  EXPECT_EQ(d->servers_down, j.servers_down);
  EXPECT_EQ(EncodeJournal(*d), m.data);
  // A standby rebuilds the same chains from it.
  ChainMap replayed(3, 2, 2);
  const std::vector<uint32_t> down(d->servers_down.begin(), d->servers_down.end());
  const std::vector<uint32_t> in(d->joined.begin(), d->joined.end());
  EXPECT_TRUE(replayed.Replay(down, d->repairs, in));
  ChainMap live(3, 2, 2);
  live.MarkDead(1);
  ASSERT_TRUE(live.Join(1, 3));
  live.Joined(3);
  live.MarkDead(3);
  ASSERT_TRUE(live.Join(3, 4));
  live.MarkDead(2);  // the journal's own kServerDown of server 2
  for (uint32_t shard = 0; shard < 3; ++shard) {
    EXPECT_EQ(std::vector<uint32_t>(replayed.Chain(shard).begin(), replayed.Chain(shard).end()),
              std::vector<uint32_t>(live.Chain(shard).begin(), live.Chain(shard).end()))
        << "shard " << shard;
    EXPECT_EQ(replayed.Head(shard), live.Head(shard)) << "shard " << shard;
  }
  EXPECT_TRUE(replayed.joining(4));
  EXPECT_FALSE(replayed.joining(3));
  // Refused: a server index beyond the members, a spare adopting twice, a join without a repair.
  EXPECT_EQ(DecodeRejoin(m, 4, 2).status().code(), Code::kProtocol);
  ControlJournal twice = j;
  twice.repairs.push_back({2, 4});
  EXPECT_EQ(DecodeRejoin(twice.Rejoin(), 5, 2).status().code(), Code::kProtocol);
  ControlJournal stray = j;
  stray.joined.insert(2);
  EXPECT_EQ(DecodeRejoin(stray.Rejoin(), 5, 2).status().code(), Code::kProtocol);
}

}  // namespace
}  // namespace ferry::ps
