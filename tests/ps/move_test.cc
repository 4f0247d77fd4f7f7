// Shards moving between live servers (elastic jobs: JobSpec::elastic, Worker::MoveShards;
// ps/coordinator/move_plan.h, ps/server/server_moves.cc), in-process over every transport
// configuration available here (FERRY_TEST_BACKENDS narrows it).
//
// The rule: a move changes no result. Worker 0 asks for moves between two of its clocks while
// worker 1 keeps pulling and pushing (under ASP it does not wait for worker 0), so pushes reach
// a shard while its rows are copied, while its head drains it (answered "moved" and sent again
// after the finish, same push id) and after it moved. The final rows (worker 0's pull of every
// key after a barrier) must equal those of the same job without moves, byte for byte: under ASP
// with constant gradients (a lost or repeated push changes the count), under BSP with gradients
// that depend on the rows. Afterwards every shard is held by exactly the servers its moved
// chain names, each copy with the same rows.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "tests/ps/job_util.h"
#include "tests/ps/training_loop.h"

// A namespace of its own: the sanitizer builds compile this file in one unit with replica_test.cc.
namespace ferry::ps::testing::move_test {
namespace {

constexpr uint32_t kServers = 3, kWorkers = 2, kDim = 4, kShards = 6;

using RowsCopy = std::map<uint64_t, std::vector<uint8_t>>;  // key -> weights and state bytes

struct Holdings {
  std::mutex mu;
  std::map<uint32_t, std::map<uint32_t, RowsCopy>> of_shard;  // shard -> server -> rows
  uint64_t moved_resends = 0, moves_in = 0, moves_out = 0, moved_replies = 0;
  std::vector<size_t> finished;  // MoveShards' counts, per call
};

// One moves list per call, made by worker by[i] (default 0) after clock `at[i]`; a call with
// retire[i] >= 0 asks for that server's leave instead (and `moves[i]` is the plan expected).
// Leaves asked for at once wait for each other and are planned in turn: their plans are not
// known in advance, so `moves` stays empty and `total_moves` counts the moves of them all.
struct MoveSpec {
  std::vector<int> at;
  std::vector<std::vector<ShardMove>> moves;
  std::vector<int> retire;
  std::vector<uint32_t> by;
  size_t total_moves = 0;
};

// Every shard held by exactly the servers of its chain (`chains`, head first) after the moves,
// each copy non-empty and equal to the first holder's.
void ExpectEachShardOnItsChain(Holdings& h, const std::vector<std::vector<uint32_t>>& chains) {
  for (uint32_t shard = 0; shard < kShards; ++shard) {
    std::set<uint32_t> holders, want(chains[shard].begin(), chains[shard].end());
    const RowsCopy* first = nullptr;
    for (const auto& [server, copy] : h.of_shard[shard]) {
      holders.insert(server);
      if (first == nullptr) {
        first = &copy;
        EXPECT_FALSE(copy.empty()) << "shard " << shard << " on server " << server;
      } else {
        EXPECT_TRUE(copy == *first) << "shard " << shard << ": server " << server
                                    << "'s copy differs from the first holder's";
      }
    }
    EXPECT_EQ(holders, want) << "shard " << shard << " is not exactly on its chain";
  }
}

// The training loop (training_loop.h) with worker 0 making `ms`'s calls, then every server's
// holdings once it stopped serving.
Status TrainAndMove(Node& node, TrainingSpec spec, const MoveSpec& ms,
                    std::vector<float>* final_rows, Holdings* h) {
  spec.after_clock = [&, own = spec.after_clock](Worker& w, int it) -> Status {
    if (own) FERRY_RETURN_IF_ERROR(own(w, it));  // the test's own, first
    for (size_t c = 0; c < ms.at.size(); ++c) {
      const uint32_t by = c < ms.by.size() ? ms.by[c] : 0;
      if (w.index() != by || ms.at[c] != it) continue;
      const bool leave = c < ms.retire.size() && ms.retire[c] >= 0;
      FERRY_ASSIGN_OR_RETURN(
          const size_t done,
          leave ? w.RetireServer(static_cast<uint32_t>(ms.retire[c])) : w.MoveShards(ms.moves[c]));
      std::lock_guard<std::mutex> lock(h->mu);
      h->finished.push_back(done);
    }
    return Status::Ok();
  };
  FERRY_RETURN_IF_ERROR(TrainOnRank(node, spec, final_rows, &h->mu));
  if (Worker* w = node.worker()) {
    std::lock_guard<std::mutex> lock(h->mu);
    h->moved_resends += w->stats().moved_resends;
  }
  FERRY_RETURN_IF_ERROR(node.Join());  // the tables may be read once the servers stopped
  for (size_t t = 0; t < node.num_shard_servers(); ++t) {
    Server* s = node.shard_server(t);
    std::lock_guard<std::mutex> lock(h->mu);
    h->moves_in += s->stats().moves_in;
    h->moves_out += s->stats().moves_out;
    h->moved_replies += s->stats().moved_replies;
    for (uint32_t shard = 0; shard < kShards; ++shard) {
      const ArrayHashMap* m = s->HostedTable(shard, 0);
      if (m == nullptr) continue;
      RowsCopy& out = h->of_shard[shard][s->index()];
      const RowLayout& l = m->layout();
      m->ForEach([&](uint32_t, const uint8_t* row) {
        uint64_t key;
        std::memcpy(&key, row, 8);
        out[key].assign(row + l.embedding_offset, row + l.stride);
      });
    }
  }
  return Status::Ok();
}

class PsMove : public ::testing::TestWithParam<BackendConfig> {
 public:  // Job and Spec: JoinThenLeave's too
  void SetUp() override {
    if (TestServerThreads() > 1) GTEST_SKIP() << "elastic jobs take one shard server a rank";
  }

  JobSpec Job(Consistency c, uint32_t replicas) const {
    JobSpec job = SmallJob(GetParam(), kServers, kWorkers, kDim);
    job.consistency.kind = c;
    job.replicas = replicas;
    job.shards = kShards;  // shard q starts on server q mod 3 (and its successor with R 2)
    job.elastic = true;
    job.tables[0].optimizer.kind = Optimizer::kSgd;
    job.tables[0].optimizer.learning_rate = 0.1f;
    job.tables[0].init = UniformInit(7);
    job.peer_timeout = Millis(3000);
    return job;
  }

  // Runs `job` with and without `ms`'s moves: same final rows; every shard on exactly the
  // servers of its chain after the moves (`chains`, head first), every copy the same.
  void Check(const JobSpec& job, const TrainingSpec& spec, const MoveSpec& ms,
             const std::vector<std::vector<uint32_t>>& chains) {
    TrainingRun plain = RunTraining(job, spec);
    ASSERT_TRUE(AllOk(plain.outcomes).ok()) << DescribeOutcomes(plain.outcomes);
    Holdings h;
    std::vector<float> rows;
    const auto outcomes =
        RunJob(job, [&](Node& node) { return TrainAndMove(node, spec, ms, &rows, &h); });
    ASSERT_TRUE(AllOk(outcomes).ok()) << DescribeOutcomes(outcomes);
    EXPECT_EQ(rows, plain.final_rows) << "the moves changed the rows";
    size_t moves = 0;
    for (size_t c = 0; c < ms.moves.size(); ++c) {
      moves += ms.moves[c].size();
      ASSERT_LT(c, h.finished.size());
      EXPECT_EQ(h.finished[c], ms.moves[c].size()) << "call " << c << " skipped a move";
    }
    if (ms.moves.empty()) {
      moves = ms.total_moves;
      size_t done = 0;
      for (size_t f : h.finished) done += f;
      EXPECT_EQ(h.finished.size(), ms.at.size()) << "a call did not return";
      EXPECT_EQ(done, moves) << "the calls' plans skipped a move";
    }
    EXPECT_EQ(h.moves_in, moves);
    EXPECT_EQ(h.moves_out, moves);
    ExpectEachShardOnItsChain(h, chains);
    std::printf("[ info     ] %s: %zu moves; %llu requests answered \"moved\" and sent again\n",
                GetParam().name.c_str(), moves, static_cast<unsigned long long>(h.moved_resends));
    // Each "moved" answer that reached a worker was sent again once (a leaving server's last
    // answers may be overtaken by its leave, whose word re-sends what it did not answer).
    EXPECT_LE(h.moved_resends, h.moved_replies);
  }

  static TrainingSpec Spec(bool constant) {
    TrainingSpec spec;
    spec.dim = kDim;
    spec.constant = constant;
    spec.iterations = 24;
    return spec;
  }
};

// Replicas 1: server 0's shards (0 and 3) go to servers 2 and 1, then shard 0 comes back to
// server 0 (into the slot it left) while shard 1 goes from server 1 to server 2.
TEST_P(PsMove, ShardsMoveUnderAspCountingEveryPushOnce) {
  MoveSpec ms;
  ms.at = {2, 10};
  ms.moves = {{{0, 0, 2}, {3, 0, 1}}, {{0, 2, 0}, {1, 1, 2}}};
  Check(Job(Consistency::kAsp, 1), Spec(true), ms, {{0}, {2}, {2}, {1}, {1}, {2}});
}

TEST_P(PsMove, ShardsMoveUnderBspWithTheSameRows) {
  MoveSpec ms;
  ms.at = {3};
  ms.moves = {{{0, 0, 2}, {4, 1, 0}}};
  Check(Job(Consistency::kBsp, 1), Spec(false), ms, {{2}, {1}, {2}, {0}, {0}, {2}});
}

// Replicas 2 (shard q on q mod 3, then the next server): a head moves (shard 0: 0 -> 2 takes
// its place, heading it) and a tail moves (shard 4: 2 -> 0).
TEST_P(PsMove, HeadsAndTailsOfChainsMove) {
  MoveSpec ms;
  ms.at = {3};
  ms.moves = {{{0, 0, 2}, {4, 2, 0}}};
  Check(Job(Consistency::kAsp, 2), Spec(true), ms,
        {{2, 1}, {1, 2}, {2, 0}, {0, 1}, {1, 0}, {2, 0}});
}

// A server leaves while the job trains (Worker::RetireServer): its shards go where PlanLeave
// says, then it leaves (its rank ends ok); the others finish with the rows of the job without
// the leave.
TEST_P(PsMove, AServerLeavesWhileTraining) {
  for (uint32_t replicas : {1u, 2u}) {
    std::vector<std::vector<uint32_t>> chains(kShards);
    for (uint32_t q = 0; q < kShards; ++q) {
      for (uint32_t r = 0; r < replicas; ++r) chains[q].push_back((q + r) % kServers);
    }
    const std::vector<uint32_t> live = {0, 1, 2};
    const auto plan = PlanLeave(chains, live, 1);
    ASSERT_TRUE(plan.has_value());
    MoveSpec ms;
    ms.at = {4};
    ms.moves = {*plan};
    ms.retire = {1};
    SCOPED_TRACE("replicas " + std::to_string(replicas));
    Check(Job(Consistency::kAsp, replicas), Spec(true), ms, ApplyMoves(chains, *plan));
  }
}

// Two servers told to leave at once (workers 0 and 1 retire servers 1 and 2 after the same
// clock): one leave waits for the other's plan and is planned over the chains it left, so all
// six shards end on server 0 in 2 + 3 moves, whichever leave went first. (The second request
// usually arrives while the first plan runs, about a millisecond: it did for 2-3 of the 3
// backends in each of 3 runs here, and a refusal instead fails the case.)
TEST_P(PsMove, TwoServersLeaveAtOnce) {
  MoveSpec ms;
  ms.at = {4, 4};
  ms.by = {0, 1};
  ms.retire = {1, 2};
  ms.total_moves = 5;
  Check(Job(Consistency::kAsp, 1), Spec(true), ms,
        std::vector<std::vector<uint32_t>>(kShards, {0}));
}

// 2 -> 3 -> 2 (JobSpec::join_slots): the join slot's rank starts only after worker 0's clock 2,
// joins the running job and takes its share of the shards (PlanJoin); once it holds one, worker
// 0 retires server 1, whose leave waits for the join's plan and is planned over the chains it
// left. Every push counted once (the rows equal the fixed-size job's), every shard on exactly
// the servers of its chain after both, and the join slot's rank ends ok.
void JoinThenLeave(const JobSpec& elastic, bool constant, bool early) {
  JobSpec job = elastic;
  job.servers = 2;
  TrainingSpec spec = PsMove::Spec(constant);
  TrainingRun plain = RunTraining(job, spec);  // the fixed-size job: 2 servers throughout
  ASSERT_TRUE(AllOk(plain.outcomes).ok()) << DescribeOutcomes(plain.outcomes);
  job.join_slots = 1;
  const int join_rank = RanksNeeded(job) - 1;
  const uint32_t joiner = job.first_join_slot();  // server 2

  std::vector<std::vector<uint32_t>> chains(kShards);
  for (uint32_t q = 0; q < kShards; ++q) chains[q] = {q % 2};
  const std::vector<ShardMove> join = PlanJoin(chains, std::vector<uint32_t>{0, 1}, joiner);
  ASSERT_EQ(join.size(), 2u);  // floor(6 / 3) copies, from the two servers
  const auto grown = ApplyMoves(chains, join);
  const auto leave = PlanLeave(grown, std::vector<uint32_t>{0, 1, joiner}, 1);
  ASSERT_TRUE(leave.has_value());
  const auto final_chains = ApplyMoves(grown, *leave);

  std::mutex mu;
  std::condition_variable cv;
  bool let_join = false;
  Holdings h;
  std::vector<float> rows;
  spec.after_clock = [&](Worker& w, int it) -> Status {
    if (w.index() != 0 || it != 2) return Status::Ok();
    {
      std::lock_guard<std::mutex> lock(mu);
      let_join = true;
    }
    cv.notify_all();
    // Pulls drive the worker's control messages until the joining server holds a shard.
    const std::vector<uint64_t> key = {1};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (w.live_servers() < 3) {
      if (std::chrono::steady_clock::now() > deadline) return Timeout("the server never joined");
      FERRY_ASSIGN_OR_RETURN(Ticket p, w.Pull(0, key));
      FERRY_RETURN_IF_ERROR(w.Wait(p));
      w.Release(p);
    }
    FERRY_ASSIGN_OR_RETURN(const size_t done, w.RetireServer(1));
    std::lock_guard<std::mutex> lock(h.mu);
    h.finished.push_back(done);
    return Status::Ok();
  };
  MoveSpec none;
  const auto outcomes = RunJob(
      job, [&](Node& node) { return TrainAndMove(node, spec, none, &rows, &h); }, Millis(120000),
      [&](int rank) {
        if (rank != join_rank || early) return;
        std::unique_lock<std::mutex> lock(mu);
        cv.wait_for(lock, std::chrono::seconds(60), [&] { return let_join; });
      });
  ASSERT_TRUE(AllOk(outcomes).ok()) << DescribeOutcomes(outcomes);
  EXPECT_EQ(rows, plain.final_rows) << "the join or the leave changed the rows";
  ASSERT_EQ(h.finished.size(), 1u);
  EXPECT_EQ(h.finished[0], leave->size());
  EXPECT_EQ(h.moves_in, join.size() + leave->size());
  EXPECT_EQ(h.moves_out, join.size() + leave->size());
  ExpectEachShardOnItsChain(h, final_chains);
  std::printf(
      "[ info     ] %s: the join moved %zu of %u shards, the leave %zu; %llu requests "
      "answered \"moved\" and sent again\n",
      ConsistencyName(job.consistency).c_str(), join.size(), kShards, leave->size(),
      static_cast<unsigned long long>(h.moved_resends));
}

TEST_P(PsMove, AServerJoinsThenAnotherLeaves) {
  {
    SCOPED_TRACE("asp");
    JoinThenLeave(Job(Consistency::kAsp, 1), true, false);
  }
  {
    SCOPED_TRACE("bsp: rows that depend on the order of updates");
    JoinThenLeave(Job(Consistency::kBsp, 1), false, false);
  }
  {
    // The join slot's rank starts with the others: it registers before the job runs and joins
    // once it does.
    SCOPED_TRACE("the join slot starts with the job");
    JoinThenLeave(Job(Consistency::kAsp, 1), true, true);
  }
}

// Moves that do not apply are refused with the reason, and nothing moves: a source that does not
// hold the shard, a target already in its chain, a shard twice, a server that cannot leave (with
// R = 3 on 3 servers every server holds every shard), a job that is not elastic.
TEST_P(PsMove, MovesThatDoNotApplyAreRefused) {
  std::vector<std::string> refusals;
  std::mutex mu;
  TrainingSpec spec = Spec(true);
  spec.iterations = 3;
  spec.after_clock = [&](Worker& w, int it) -> Status {
    if (w.index() != 0 || it != 1) return Status::Ok();
    const std::vector<std::vector<ShardMove>> bad = {
        {{0, 1, 2}}, {{0, 0, 0}}, {{0, 0, 1}, {0, 0, 2}}};
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& moves : bad) {
      auto r = w.MoveShards(moves);
      refusals.push_back(r.ok() ? "moved" : r.status().ToString());
    }
    auto r = w.RetireServer(1);
    refusals.push_back(r.ok() ? "left" : r.status().ToString());
    return Status::Ok();
  };
  JobSpec job = Job(Consistency::kAsp, 3);
  TrainingRun run = RunTraining(job, spec);
  ASSERT_TRUE(AllOk(run.outcomes).ok()) << DescribeOutcomes(run.outcomes);
  job.elastic = false;
  RunTraining(job, spec);  // its refusal is appended
  ASSERT_EQ(refusals.size(), 8u);
  for (const std::string& r : refusals)
    EXPECT_NE(r.find("InvalidArgument"), std::string::npos) << r;
  EXPECT_NE(refusals[0].find("cannot move"), std::string::npos) << refusals[0];
  EXPECT_NE(refusals[2].find("moves twice"), std::string::npos) << refusals[2];
  EXPECT_NE(refusals[3].find("cannot leave"), std::string::npos) << refusals[3];
  EXPECT_NE(refusals[4].find("elastic"), std::string::npos) << refusals[4];
}

INSTANTIATE_TEST_SUITE_P(Backends, PsMove, ::testing::ValuesIn(JobConfigs()), JobConfigName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsMove);

}  // namespace
}  // namespace ferry::ps::testing::move_test
