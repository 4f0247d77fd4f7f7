// Elastic jobs under ferry-train (--elastic; docs/ps.md "Moving shards between live servers"): a
// server rank leaves while the job trains. A bsp run with fixed seeds on 3 servers (12 shards)
// and 2 workers has a server sent SIGTERM at a random moment after its first streaming
// evaluation (server 2 over tcp; over ucx server 0, on rank 0 with the coordinator, which stays):
// its shards move to the other two while the workers push, its server ends (a server-only rank
// exits 0), ferry-train's local launcher lets the others run on, and the job finishes on 2
// servers. The final test logloss must be within 0.5 % of the same job's at a fixed size (3
// servers, 12 shards, not elastic), and, as bsp applies every clock's pushes in the same order
// wherever a row lives, the model file must equal that job's byte for byte: no push lost or
// applied twice by the moves.
//
// The random moments come from one seed, printed; FERRY_ELASTIC_SEED=N replays them.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>

#include "tests/train/train_test_util.h"

namespace ferry::train_test {
namespace {

class Elastic : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = GenerateData({"--fields", "10", "--features", "20000", "--samples", "40000",
                          "--test-samples", "2000", "--seed", "29"})
                .release();
    seed_ = SeedFromEnv("FERRY_ELASTIC_SEED");
    rng_.seed(seed_);
  }
  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
  }

  static std::vector<std::string> Job(const std::string& transport) {
    return {"--model",       "ftrl", "--train",      data_->train, "--test",       data_->test,
            "--consistency", "bsp",  "--batch-size", "64",         "--epochs",     "2",
            "--workers",     "2",    "--servers",    "3",          "--seed",       "5",
            "--shards",      "12",   "--transport",  transport,    "--eval-every", "25"};
  }

  static TrainRun Reference(std::string* bytes) {
    const std::string out = data_->dir / "fixed.model";
    TrainRun r = Train(data_->dir, "fixed", Cat(Job("tcp"), {"--model-out", out}), 180);
    EXPECT_TRUE(r.ok()) << r.proc.Describe();
    *bytes = Slurp(out);
    return r;
  }

  // The elastic job over `transport`, server rank `rank` sent SIGTERM a random 0-300 ms after
  // the first streaming evaluation line (rank 0 runs the coordinator too: it stays).
  static void LeaveWhileTraining(const std::string& transport, int rank, const TrainRun& fixed,
                                 const std::string& fixed_bytes) {
    const std::string tag = "elastic_" + transport + "_rank" + std::to_string(rank);
    const std::string server = "server " + std::to_string(rank);
    const std::string metrics = data_->dir / (tag + ".jsonl");
    const int delay_ms = std::uniform_int_distribution<int>(0, 300)(rng_);
    pid_t signalled = -1;
    auto leaver = SignalRankAfter([&] { return !Lines(Slurp(metrics)).empty(); }, delay_ms, rank,
                                  SIGTERM, &signalled);
    const std::string out = data_->dir / (tag + ".model");
    TrainRun run =
        Train(data_->dir, tag, Cat(Job(transport), {"--elastic", "--model-out", out}), 180, leaver);
    std::printf(
        "%s: %s sent SIGTERM %d ms into training; the job took %.1f s (%.1f s at a fixed size); "
        "test logloss %.5f (fixed %.5f)\n",
        tag.c_str(), server.c_str(), delay_ms, run.proc.seconds, fixed.proc.seconds, run.logloss(),
        fixed.logloss());
    // The coordinator's account of the moves (how many, how long).
    for (size_t at = run.proc.err.find("ferry coordinator: "); at != std::string::npos;
         at = run.proc.err.find("ferry coordinator: ", at + 1)) {
      const std::string line = run.proc.err.substr(at, run.proc.err.find('\n', at) - at);
      if (line.find("shard moves") != std::string::npos ||
          line.find(" left ") != std::string::npos) {
        std::printf("%s: %s\n", tag.c_str(), line.c_str());
      }
    }
    ASSERT_GT(signalled, 0) << tag << ": the job ended before the SIGTERM: " << run.proc.Describe();
    ASSERT_TRUE(run.ok()) << tag << ": " << run.proc.Describe();
    // The coordinator carried the leave out; the launcher saw no rank fail.
    EXPECT_NE(run.proc.err.find("ferry coordinator: " + server + " left the job"),
              std::string::npos)
        << run.proc.Describe();
    EXPECT_EQ(run.proc.err.find("exited with status"), std::string::npos) << run.proc.Describe();
    EXPECT_NE(run.proc.out.find("on 3 servers + 2 workers over " + transport +
                                " (1 server removed while training)"),
              std::string::npos)
        << run.proc.Describe();
    EXPECT_EQ(run.final_line.value("samples", uint64_t{0}), 2 * 40000u) << run.final_line;
    EXPECT_LE(std::fabs(run.logloss() - fixed.logloss()), 0.005 * fixed.logloss())
        << tag << ": logloss " << run.logloss() << " against " << fixed.logloss()
        << " at a fixed size";
    EXPECT_EQ(Slurp(out), fixed_bytes) << tag << ": the model differs from the fixed-size job's";
  }

  static GeneratedData* data_;
  static uint64_t seed_;
  static std::mt19937_64 rng_;
};
GeneratedData* Elastic::data_ = nullptr;
uint64_t Elastic::seed_ = 0;
std::mt19937_64 Elastic::rng_;

TEST_F(Elastic, AServerLeavesWhileTrainingAndTheModelIsTheFixedSizeJobs) {
  std::string fixed_bytes;
  const TrainRun fixed = Reference(&fixed_bytes);
  ASSERT_FALSE(fixed_bytes.empty());
  LeaveWhileTraining("tcp", 2, fixed, fixed_bytes);
  LeaveWhileTraining("ucx", 0, fixed, fixed_bytes);
}

// 2 -> 3 -> 2 (--join-slots): the job starts on 2 servers (12 shards) with one join slot and a
// chosen coordinator address (FERRY_COORDINATOR); once training began a second ferry-train
// starts the join slot's server (--join 0), which joins and takes its share (4 of the 12 shards
// move); once it holds one, server 1 gets SIGTERM and leaves (its leave waits for the join's
// plan). The model must equal the 2-server job's byte for byte, and the logloss be within 0.5 %.
TEST_F(Elastic, AServerJoinsAndAnotherLeavesWhileTraining) {
  const auto job = [](const std::string& transport) {
    std::vector<std::string> args = Job(transport);
    *std::find(args.begin(), args.end(), "3") = "2";               // --servers 2
    *(std::find(args.begin(), args.end(), "--epochs") + 1) = "4";  // room for the join and leave
    return args;
  };
  const std::string fixed_out = data_->dir / "fixed2.model";
  const TrainRun fixed =
      Train(data_->dir, "fixed2", Cat(job("tcp"), {"--model-out", fixed_out}), 180);
  ASSERT_TRUE(fixed.ok()) << fixed.proc.Describe();
  const std::string fixed_bytes = Slurp(fixed_out);
  for (const std::string transport : {"tcp", "ucx"}) {
    const std::string tag = "join_" + transport;
    const std::string metrics = data_->dir / (tag + ".jsonl");
    const std::string out = data_->dir / (tag + ".model");
    const std::string joiner_err = data_->dir / (tag + "_joiner.err");
    const std::vector<std::string> args =
        Cat(job(transport), {"--elastic", "--join-slots", "1", "--model-out", out});
    const std::string coordinator = "127.0.0.1:" + std::to_string(FreePort());
    ASSERT_EQ(setenv("FERRY_COORDINATOR", coordinator.c_str(), 1), 0);
    std::thread joiner;
    Proc joined;
    int step = 0;  // 0: training not begun; 1: the joiner started; 2: server 1 signalled
    pid_t leaver = -1;
    TrainRun run = Train(data_->dir, tag, args, 180, [&](pid_t launcher) {
      if (step == 0 && !Lines(Slurp(metrics)).empty()) {
        step = 1;
        // ferry-train --join 0 with the job's own flags, its stderr kept in a file to watch.
        std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>" + joiner_err,
                                         TrainBin()};
        argv = Cat(argv, Cat(args, {"--join", "0", "-q"}));
        joiner = std::thread([&joined, argv] { joined = Exec(argv, 120); });
      } else if (step == 1 && Slurp(joiner_err).find("holds its copy") != std::string::npos) {
        step = 2;
        const pid_t pid = RankPid(launcher, 1);
        if (pid > 0 && kill(pid, SIGTERM) == 0) leaver = pid;
      }
    });
    if (joiner.joinable()) joiner.join();
    unsetenv("FERRY_COORDINATOR");
    std::printf(
        "%s: the job took %.1f s (%.1f s at a fixed size); test logloss %.5f (fixed %.5f)\n",
        tag.c_str(), run.proc.seconds, fixed.proc.seconds, run.logloss(), fixed.logloss());
    for (size_t at = run.proc.err.find("ferry coordinator: "); at != std::string::npos;
         at = run.proc.err.find("ferry coordinator: ", at + 1)) {
      std::printf("%s: %s\n", tag.c_str(),
                  run.proc.err.substr(at, run.proc.err.find('\n', at) - at).c_str());
    }
    ASSERT_TRUE(run.ok()) << tag << ": " << run.proc.Describe();
    ASSERT_EQ(step, 2) << tag << ": the join or the leave did not happen in time:\n"
                       << run.proc.Describe() << "\njoiner: " << Slurp(joiner_err);
    EXPECT_GT(leaver, 0);
    EXPECT_EQ(joined.exit_code, 0) << tag << ": the joiner: " << joined.Describe() << "\n"
                                   << Slurp(joiner_err);
    EXPECT_NE(run.proc.err.find("(rank 4, pid"), std::string::npos) << run.proc.Describe();
    EXPECT_NE(run.proc.err.find("ferry coordinator: server 1 left the job"), std::string::npos)
        << run.proc.Describe();
    EXPECT_NE(run.proc.out.find("on 2 servers + 2 workers over " + transport +
                                " (1 server joined and 1 removed while training)"),
              std::string::npos)
        << run.proc.Describe();
    EXPECT_EQ(run.final_line.value("samples", uint64_t{0}), 4 * 40000u) << run.final_line;
    EXPECT_LE(std::fabs(run.logloss() - fixed.logloss()), 0.005 * fixed.logloss())
        << tag << ": logloss " << run.logloss() << " against " << fixed.logloss();
    EXPECT_EQ(Slurp(out), fixed_bytes) << tag << ": the model differs from the fixed-size job's";
  }
}

// 2 -> 3 -> 2 workers (--worker-join-slots): the job starts with 2 workers and one worker join
// slot, its training data dealt to the workers as they ask (1/96 of it a piece). Once training
// began a second ferry-train starts the worker join slot (--join-worker 0), which joins and takes
// pieces; once it trained some (its stderr says it joined), worker 1 gets SIGTERM and leaves
// after the piece it holds. Every training sample must be trained on exactly once per pass
// (the final line's samples, the leaver's counted through its farewell), the summary must name
// the join and the leave, and the test logloss be within 0.5 % of the fixed 2-worker job's.
TEST_F(Elastic, AWorkerJoinsAndAnotherLeavesWhileTraining) {
  const auto job = [](const std::string& transport) {
    std::vector<std::string> args = Job(transport);
    *std::find(args.begin(), args.end(), "3") = "2";               // --servers 2
    *(std::find(args.begin(), args.end(), "--epochs") + 1) = "6";  // room for the join and leave
    return args;
  };
  const TrainRun fixed = Train(data_->dir, "fixed_workers", job("tcp"), 180);
  ASSERT_TRUE(fixed.ok()) << fixed.proc.Describe();
  for (const std::string transport : {"tcp", "ucx"}) {
    const std::string tag = "workers_" + transport;
    const std::string metrics = data_->dir / (tag + ".jsonl");
    const std::string joiner_err = data_->dir / (tag + "_joiner.err");
    const std::vector<std::string> args =
        Cat(job(transport), {"--elastic", "--worker-join-slots", "1"});
    const std::string coordinator = "127.0.0.1:" + std::to_string(FreePort());
    ASSERT_EQ(setenv("FERRY_COORDINATOR", coordinator.c_str(), 1), 0);
    std::thread joiner;
    Proc joined;
    int step = 0;  // 0: training not begun; 1: the joiner started; 2: worker 1 signalled
    TrainRun run = Train(data_->dir, tag, args, 180, [&](pid_t launcher) {
      if (step == 0 && !Lines(Slurp(metrics)).empty()) {
        step = 1;
        std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>" + joiner_err,
                                         TrainBin()};
        argv = Cat(argv, Cat(args, {"--join-worker", "0"}));
        joiner = std::thread([&joined, argv] { joined = Exec(argv, 120); });
      } else if (step == 1 &&
                 Slurp(joiner_err).find("joined the running job") != std::string::npos) {
        step = 2;
        const pid_t pid = RankPid(launcher, 3);  // worker 1
        EXPECT_GT(pid, 0);
        if (pid > 0) {
          EXPECT_EQ(kill(pid, SIGTERM), 0);
        }
      }
    });
    if (joiner.joinable()) joiner.join();
    unsetenv("FERRY_COORDINATOR");
    std::printf(
        "%s: the job took %.1f s (%.1f s at a fixed size); test logloss %.5f (fixed %.5f)\n",
        tag.c_str(), run.proc.seconds, fixed.proc.seconds, run.logloss(), fixed.logloss());
    for (const char* what : {"ferry coordinator: worker", "ferry-train: worker 1 left"}) {
      for (size_t at = run.proc.err.find(what); at != std::string::npos;
           at = run.proc.err.find(what, at + 1)) {
        std::printf("%s: %s\n", tag.c_str(),
                    run.proc.err.substr(at, run.proc.err.find('\n', at) - at).c_str());
      }
    }
    ASSERT_TRUE(run.ok()) << tag << ": " << run.proc.Describe();
    ASSERT_EQ(step, 2) << tag << ": the join did not happen in time:\n"
                       << run.proc.Describe() << "\njoiner: " << Slurp(joiner_err);
    EXPECT_EQ(joined.exit_code, 0) << tag << ": the joiner: " << joined.Describe() << "\n"
                                   << Slurp(joiner_err);
    EXPECT_NE(run.proc.err.find("ferry coordinator: worker 1 (rank 3"), std::string::npos)
        << run.proc.Describe();
    EXPECT_NE(run.proc.err.find("ferry-train: worker 1 left the job after"), std::string::npos)
        << run.proc.Describe();
    EXPECT_NE(run.proc.out.find("on 2 servers + 2 workers over " + transport +
                                " (1 worker joined and 1 left while training)"),
              std::string::npos)
        << run.proc.Describe();
    // Exactly once per pass: the workers' counts, the leaver's included, add up to 6 passes.
    EXPECT_EQ(run.final_line.value("samples", uint64_t{0}), 6 * 40000u) << run.final_line;
    EXPECT_LE(std::fabs(run.logloss() - fixed.logloss()), 0.005 * fixed.logloss())
        << tag << ": logloss " << run.logloss() << " against " << fixed.logloss();
  }
}

// What dealt training cannot do is refused before any rank starts, with the reason.
TEST_F(Elastic, WorkerJoinSlotsNeedFixedPassesWithoutHeldOutData) {
  TrainRun r = Train(
      data_->dir, "workers_held_out",
      Cat(Job("tcp"), {"--elastic", "--worker-join-slots", "1", "--validation-fraction", "0.1"}),
      60);
  EXPECT_NE(r.proc.exit_code, 0) << r.proc.Describe();
  EXPECT_NE(r.proc.err.find("give --epochs N (no held-out data"), std::string::npos)
      << r.proc.Describe();
  EXPECT_EQ(r.proc.err.find("rank 0"), std::string::npos)
      << "a rank started: " << r.proc.Describe();
  // A followed directory in lockstep (bsp): each worker's files are fixed at the start.
  TrainRun lockstep = Train(data_->dir, "workers_lockstep",
                            {"--follow", data_->dir.path(), "--fields", "10", "--consistency",
                             "bsp", "--elastic", "--worker-join-slots", "1", "--idle-exit", "1"},
                            60);
  EXPECT_NE(lockstep.proc.exit_code, 0) << lockstep.proc.Describe();
  EXPECT_NE(lockstep.proc.err.find("cannot be read in lockstep"), std::string::npos)
      << lockstep.proc.Describe();
  EXPECT_EQ(lockstep.proc.err.find("rank 0"), std::string::npos)
      << "a rank started: " << lockstep.proc.Describe();
}

// Refused before any rank starts, with the reason.
TEST_F(Elastic, ElasticWithSparesIsRefused) {
  TrainRun r = Train(data_->dir, "elastic_spares",
                     Cat(Job("tcp"), {"--elastic", "--replicas", "2", "--spares", "1"}), 60);
  EXPECT_NE(r.proc.exit_code, 0) << r.proc.Describe();
  EXPECT_NE(r.proc.err.find("elastic jobs need spares 0"), std::string::npos) << r.proc.Describe();
  EXPECT_EQ(r.proc.err.find("rank 0"), std::string::npos)
      << "a rank started: " << r.proc.Describe();
}

}  // namespace
}  // namespace ferry::train_test
