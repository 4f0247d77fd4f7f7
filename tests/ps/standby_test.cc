// The standby coordinator (ps/coordinator/coordinator.h, "Standby"), driven by hand: control
// clients play the members of a job whose rank 0 died and rejoin it with journals written for
// the case (ps/wire/control_journal.h). What the standby tells them after the takeover is what
// it rebuilt; a rejoin it must not take is refused. Real processes: tests/ps/failure_test.cc
// (PsStandby) and tests/train/replica_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ps/coordinator/coordinator.h"
#include "ps/wire/control_journal.h"

namespace ferry::ps {
namespace {

// 3 servers (ranks 0..2) and 2 workers (ranks 3, 4), every shard on 2 servers, bsp.
JobSpec Job() {
  JobSpec job;
  TableSpec t;
  t.name = "emb";
  t.dim = 4;
  job.tables.push_back(t);
  job.servers = 3;
  job.workers = 2;
  job.replicas = 2;
  job.consistency.kind = Consistency::kBsp;
  job.transport = "tcp";
  job.peer_timeout = Millis(150);
  return job;
}

std::vector<MemberInfo> Membership() {
  std::vector<MemberInfo> m;
  for (uint32_t s = 0; s < 3; ++s) m.push_back({s, Role::kServer, s, "127.0.0.1:1", "h", 100 + s});
  for (uint32_t w = 0; w < 2; ++w) m.push_back({3 + w, Role::kWorker, w, "", "h", 200 + w});
  return m;
}

ControlJournal Journal(const JobSpec& job, Role role, uint32_t index) {
  ControlJournal j;
  j.role = role;
  j.index = index;
  j.rank = role == Role::kServer ? index : 3 + index;
  j.fingerprint = job.Fingerprint();
  j.membership = Membership();
  j.started = true;
  return j;
}

struct Member {
  std::unique_ptr<ControlClient> client;
  // Every message it got within `wait`, by kind.
  std::multimap<ControlKind, ControlMessage> Collect(Millis wait) {
    std::multimap<ControlKind, ControlMessage> got;
    while (true) {
      auto m = client->Receive(wait);
      if (!m.ok()) break;
      got.emplace(m->kind, *m);
    }
    return got;
  }
};

Member Rejoin(const Coordinator& standby, const JobSpec& job, const ControlJournal& j) {
  Member m;
  auto c = ControlClient::Connect(standby.address(), job, nullptr, Millis(5000));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return m;
  m.client = std::move(c).value();
  EXPECT_TRUE(m.client->Send(j.Rejoin()).ok());
  return m;
}

// Rank 0 died in the middle of clock 5: server 1 had been told to apply it (server 2 not yet),
// worker 1 heard barrier 3 released (worker 0 not yet). The standby tells every live server to
// apply clock 5 again (same worker set), removes server 0, tells the workers the job's clock
// again and releases barrier 3 for worker 0; worker 1 is not waiting and hears no release.
TEST(Standby, RebuildsTheJobFromTheRejoins) {
  const JobSpec job = Job();
  auto standby = Coordinator::StartStandby(job, "127.0.0.1:0", 1);
  ASSERT_TRUE(standby.ok()) << standby.status().ToString();
  EXPECT_TRUE((*standby)->standing_by());
  ControlJournal s1 = Journal(job, Role::kServer, 1), s2 = Journal(job, Role::kServer, 2);
  ControlJournal w0 = Journal(job, Role::kWorker, 0), w1 = Journal(job, Role::kWorker, 1);
  const uint32_t without[] = {1};
  s1.min_clock = s2.min_clock = 4;
  s1.apply_clock = 5;
  s1.apply_without = EncodeWorkerSet(without);
  s2.apply_clock = 4;
  w0.min_clock = 3;  // the update for 4 had not reached it
  w1.min_clock = 4;
  w0.clock = w1.clock = 5;
  w0.barrier_sent = 3;
  w0.barrier_released = 2;
  w1.barrier_sent = 3;
  w1.barrier_released = 3;
  // Its own rank (server 1 is rank 1) last: the takeover waits for it.
  Member m2 = Rejoin(**standby, job, s2);
  Member mw0 = Rejoin(**standby, job, w0);
  Member mw1 = Rejoin(**standby, job, w1);
  Member m1 = Rejoin(**standby, job, s1);
  std::multimap<ControlKind, ControlMessage> got[4] = {
      m1.Collect(Millis(500)), m2.Collect(Millis(100)), mw0.Collect(Millis(100)),
      mw1.Collect(Millis(100))};
  EXPECT_FALSE((*standby)->standing_by());
  for (int s : {0, 1}) {
    auto apply = got[s].find(ControlKind::kApplyClock);
    ASSERT_NE(apply, got[s].end()) << "server " << s + 1 << " was not told to apply clock 5";
    EXPECT_EQ(apply->second.value, 5u);
    EXPECT_EQ(apply->second.data, EncodeWorkerSet(without));
    auto down = got[s].find(ControlKind::kServerDown);
    ASSERT_NE(down, got[s].end()) << "server " << s + 1 << " did not hear server 0 is gone";
    EXPECT_EQ(down->second.index, 0u);
  }
  for (int w : {2, 3}) {
    auto update = got[w].find(ControlKind::kClockUpdate);
    ASSERT_NE(update, got[w].end()) << "worker " << w - 2;
    EXPECT_EQ(update->second.value, 4u);  // the newest any member heard
    EXPECT_EQ(got[w].count(ControlKind::kServerDown), 1u) << "worker " << w - 2;
    EXPECT_EQ(got[w].count(ControlKind::kApplyClock), 0u);
  }
  ASSERT_EQ(got[2].count(ControlKind::kBarrierRelease), 1u) << "worker 0 waits on barrier 3";
  EXPECT_EQ(got[2].find(ControlKind::kBarrierRelease)->second.value, 3u);
  EXPECT_EQ(got[3].count(ControlKind::kBarrierRelease), 0u);
  // Both servers answer: clock 5 is applied and the workers hear the job's clock 5.
  for (Member* s : {&m1, &m2}) {
    ControlMessage done;
    done.kind = ControlKind::kClockApplied;
    done.value = 5;
    ASSERT_TRUE(s->client->Send(done).ok());
  }
  auto after = mw0.Collect(Millis(300));
  auto update = after.find(ControlKind::kClockUpdate);
  ASSERT_NE(update, after.end());
  EXPECT_EQ(update->second.value, 5u);
}

// Rank 0 died while it sent kShutdown (every worker had finished): server 2 and worker 1 heard it
// and left, server 1 and worker 0 did not and rejoin. The standby does not take the two missing
// for lost (a second failure), it tells the rest the job is over.
TEST(Standby, MembersThatHeardTheShutdownAreNotTakenForLost) {
  const JobSpec job = Job();
  auto standby = Coordinator::StartStandby(job, "127.0.0.1:0", 1);
  ASSERT_TRUE(standby.ok()) << standby.status().ToString();
  ControlJournal w0 = Journal(job, Role::kWorker, 0);
  w0.finished = true;
  Member mw0 = Rejoin(**standby, job, w0);
  Member m1 = Rejoin(**standby, job, Journal(job, Role::kServer, 1));
  for (Member* m : {&mw0, &m1}) {
    auto got = m->Collect(Millis(500));  // the takeover waits peer_timeout for the missing
    EXPECT_EQ(got.count(ControlKind::kShutdown), 1u);
    EXPECT_EQ(got.count(ControlKind::kFailure), 0u);
  }
}

// The next message of `kind` (others are skipped), or a failure.
Result<ControlMessage> Await(ControlClient* c, ControlKind kind, Millis within = Millis(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    auto m = c->Receive(Millis(100));
    if (m.ok() && m->kind == kind) return m;
    if (!m.ok() && m.status().code() != Code::kTimeout) return m.status();
  }
  return Timeout("no " + std::string(ControlKindName(kind)));
}

// The whole way, with real control clients: they register with a primary coordinator, the job
// starts and runs a clock, then rank 0 (the primary and server 0's client) goes away. The other
// clients fail over by themselves (the journal, the rejoin), the standby takes over, server 0 is
// removed, and the job goes on: a barrier, the finish and the shutdown go through the standby.
TEST(Standby, ClientsFailOverAndTheJobGoesOn) {
  const JobSpec job = Job();
  auto primary = Coordinator::Start(job, "127.0.0.1:0");
  ASSERT_TRUE(primary.ok()) << primary.status().ToString();
  auto standby = Coordinator::StartStandby(job, "127.0.0.1:0", 1);
  ASSERT_TRUE(standby.ok()) << standby.status().ToString();
  std::vector<std::unique_ptr<ControlClient>> c;  // servers 0..2, then workers 0..1
  for (const MemberInfo& i : Membership()) {
    auto client = ControlClient::Connect((*primary)->address(), job, nullptr, Millis(5000));
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    ControlMessage reg;
    reg.kind = ControlKind::kRegister;
    reg.rank = i.rank;
    reg.role = i.role;
    reg.index = i.index;
    reg.value = job.Fingerprint();
    reg.members = {i};
    if (i.rank == 1) reg.text = (*standby)->address();  // as Node does on the standby's rank
    ASSERT_TRUE((*client)->Send(reg).ok());
    c.push_back(std::move(client).value());
  }
  ControlMessage m;
  for (auto& client : c) {
    auto mem = Await(client.get(), ControlKind::kMembership);
    ASSERT_TRUE(mem.ok()) << mem.status().ToString();
    EXPECT_EQ(mem->text, (*standby)->address());
    m.kind = ControlKind::kReady;
    ASSERT_TRUE(client->Send(m).ok());
  }
  for (auto& client : c) ASSERT_TRUE(Await(client.get(), ControlKind::kStart).ok());
  // Clock 1 under BSP: every server applies it, then the workers hear it.
  m.kind = ControlKind::kClock;
  m.value = 1;
  for (size_t w = 3; w < 5; ++w) ASSERT_TRUE(c[w]->Send(m).ok());
  for (size_t s = 0; s < 3; ++s) {
    ASSERT_TRUE(Await(c[s].get(), ControlKind::kApplyClock).ok());
    ControlMessage done;
    done.kind = ControlKind::kClockApplied;
    done.value = 1;
    ASSERT_TRUE(c[s]->Send(done).ok());
  }
  for (size_t w = 3; w < 5; ++w) {
    auto u = Await(c[w].get(), ControlKind::kClockUpdate);
    ASSERT_TRUE(u.ok()) << u.status().ToString();
    EXPECT_EQ(u->value, 1u);
  }
  // Rank 0 dies: server 0's client and the primary. (The primary may still see server 0 go and
  // remove it: then the members hear kServerDown from it, and the standby from their journals.)
  c[0].reset();
  primary->reset();
  for (size_t i = 1; i < 5; ++i) {
    auto down = Await(c[i].get(), ControlKind::kServerDown);
    ASSERT_TRUE(down.ok()) << "member " << i << ": " << down.status().ToString();
    EXPECT_EQ(down->index, 0u);
  }
  const auto deadline = std::chrono::steady_clock::now() + Millis(5000);
  while ((*standby)->standing_by() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(Millis(5));
  }
  EXPECT_FALSE((*standby)->standing_by()) << "no takeover";
  for (size_t i = 1; i < 5; ++i) EXPECT_TRUE(c[i]->status().ok()) << c[i]->status().ToString();
  m.kind = ControlKind::kBarrier;
  m.value = 1;
  for (size_t w = 3; w < 5; ++w) ASSERT_TRUE(c[w]->Send(m).ok());
  for (size_t w = 3; w < 5; ++w) {
    auto r = Await(c[w].get(), ControlKind::kBarrierRelease);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->value, 1u);
  }
  m.kind = ControlKind::kFinish;
  for (size_t w = 3; w < 5; ++w) ASSERT_TRUE(c[w]->Send(m).ok());
  for (size_t i = 1; i < 5; ++i) {
    ASSERT_TRUE(Await(c[i].get(), ControlKind::kShutdown).ok()) << "member " << i;
  }
  c.clear();
  EXPECT_TRUE((*standby)->Join().ok());
}

// A member that lost only its own link to rank 0 rejoins, but the standby's rank still has rank 0:
// no takeover; the rejoin is refused after twice peer_timeout, and the client fails with it.
TEST(Standby, RefusesRejoinsWhileItsOwnRankKeepsTheCoordinator) {
  const JobSpec job = Job();
  auto standby = Coordinator::StartStandby(job, "127.0.0.1:0", 1);
  ASSERT_TRUE(standby.ok()) << standby.status().ToString();
  Member m = Rejoin(**standby, job, Journal(job, Role::kServer, 2));
  auto got = m.Collect(job.peer_timeout * 4);
  auto reject = got.find(ControlKind::kReject);
  ASSERT_NE(reject, got.end()) << "the rejoin was not refused";
  EXPECT_NE(reject->second.text.find("still reaches the coordinator on rank 0"), std::string::npos)
      << reject->second.text;
  EXPECT_TRUE((*standby)->standing_by());
}

// Rejoins it cannot take are refused at once: another job, before the start, malformed, twice.
TEST(Standby, RefusesBadRejoinsAtOnce) {
  const JobSpec job = Job();
  auto standby = Coordinator::StartStandby(job, "127.0.0.1:0", 1);
  ASSERT_TRUE(standby.ok()) << standby.status().ToString();
  auto refused = [&](ControlMessage rejoin, const std::string& why) {
    Member m;
    auto c = ControlClient::Connect((*standby)->address(), job, nullptr, Millis(5000));
    ASSERT_TRUE(c.ok());
    m.client = std::move(c).value();
    ASSERT_TRUE(m.client->Send(rejoin).ok());
    // At once, but a loaded machine may take longer than one short wait (150 ms missed the
    // answer once beside a build): collect until the refusal, within 2 s.
    std::multimap<ControlKind, ControlMessage> got;
    const auto deadline = std::chrono::steady_clock::now() + Millis(2000);
    while (got.count(ControlKind::kReject) == 0 && std::chrono::steady_clock::now() < deadline) {
      got.merge(m.Collect(Millis(50)));
    }
    auto reject = got.find(ControlKind::kReject);
    ASSERT_NE(reject, got.end()) << why;
    EXPECT_NE(reject->second.text.find(why), std::string::npos) << reject->second.text;
  };
  ControlMessage other = Journal(job, Role::kServer, 2).Rejoin();
  other.value ^= 1;
  refused(other, "another job");
  ControlJournal early = Journal(job, Role::kServer, 2);
  early.started = false;
  refused(early.Rejoin(), "before the job started");
  ControlMessage bad = Journal(job, Role::kServer, 2).Rejoin();
  bad.data.pop_back();
  refused(bad, "rejoin journal");
  // The same member twice: one rejoin is kept (waiting for the takeover), the other refused at
  // once. Which of the two the standby reads first is its poll's choice (on a loaded machine the
  // later one was read first).
  Member first = Rejoin(**standby, job, Journal(job, Role::kWorker, 1));
  Member second = Rejoin(**standby, job, Journal(job, Role::kWorker, 1));
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + Millis(2000);
  while (text.empty() && std::chrono::steady_clock::now() < deadline) {
    for (Member* m : {&first, &second}) {
      auto got = m->Collect(Millis(20));
      auto reject = got.find(ControlKind::kReject);
      if (reject != got.end() && text.empty()) text = reject->second.text;
    }
  }
  EXPECT_NE(text.find("rejoined twice"), std::string::npos) << "refusal: '" << text << "'";
}

}  // namespace
}  // namespace ferry::ps
