// Chain-replicated shards under load, with real processes (ferry-train --replicas; ps/job/chain.h).
// A bsp run with fixed seeds on 3 servers and 2 workers, every shard on 2 servers, has one server
// killed with SIGKILL at a random moment while it trains (after its first streaming evaluation,
// so well past the start). The job must not stop: the dead server's shards fail over to their
// replicas, ferry-train's local launcher reports the death and lets the others run on, and the
// final model FILE equals that of a run without replicas and without a kill, byte for byte: no
// acknowledged update lost, none applied twice, nothing reordered.
//
// The random moments come from one seed, printed; FERRY_REPLICA_SEED=N replays them. Each kill
// prints a RELIABILITY line (tests/common/reliability.h) with the training's stall: the longest gap
// between two streaming evaluations (every 25 batches) beyond the run's median gap, the time the
// failover cost the training.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include "tests/common/reliability.h"
#include "tests/train/train_test_util.h"

namespace ferry::train_test {
namespace {

using Clock = std::chrono::steady_clock;

class Replicas : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    train_ = *dir_ / "train.svm";
    test_ = *dir_ / "test.svm";
    Generate(train_, test_,
             {"--fields", "10", "--features", "20000", "--samples", "40000", "--test-samples",
              "500", "--seed", "23"});
    seed_ = SeedFromEnv("FERRY_REPLICA_SEED");
    rng_.seed(seed_);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static std::vector<std::string> Job(const std::string& model, const std::string& transport) {
    return {"--model",       model,     "--train",      train_, "--test",   test_,
            "--consistency", "bsp",     "--batch-size", "64",   "--epochs", "4",
            "--workers",     "2",       "--servers",    "3",    "--seed",   "5",
            "--transport",   transport, "--eval-every", "25",   "--hidden", "16,8"};
  }

  // The model of the run without replicas and without faults.
  static std::string Reference(const std::string& model) {
    const std::string out = *dir_ / (model + ".ref");
    TrainRun r = Train(*dir_, model + "_ref", Cat(Job(model, "tcp"), {"--model-out", out}), 180);
    EXPECT_TRUE(r.ok()) << r.proc.Describe();
    reference_seconds_ = r.proc.seconds;
    return reference_[model] = Slurp(out);
  }

  // Runs the job with --replicas 2 over `transport` and SIGKILLs `rank` (a server-only rank) a
  // random 0-500 ms after the first streaming evaluation line appeared. Returns the model file.
  // `extra`: more ferry-train flags (a tag suffix names them).
  static std::string KillOneServer(const std::string& model, const std::string& transport, int rank,
                                   const std::vector<std::string>& extra = {},
                                   const std::string& suffix = "") {
    const std::string tag = model + "_" + transport + "_rank" + std::to_string(rank) + suffix;
    const std::string metrics = *dir_ / (tag + ".jsonl");
    const int delay_ms = std::uniform_int_distribution<int>(0, 500)(rng_);
    pid_t killed = -1;
    auto killer = SignalRankAfter([&] { return !Lines(Slurp(metrics)).empty(); }, delay_ms, rank,
                                  SIGKILL, &killed);
    const std::string out = *dir_ / (tag + ".model");
    // Train() names its own metrics file <dir>/<tag>.jsonl: the killer watches that one.
    TrainRun run = Train(
        *dir_, tag, Cat(Cat(Job(model, transport), extra), {"--replicas", "2", "--model-out", out}),
        180, killer);
    const std::string bytes = Slurp(out);
    Report(tag, transport, run, bytes == reference_[model], killed > 0);
    std::printf(
        "%s: rank %d killed %d ms into training; the job took %.1f s (%.1f s without "
        "replicas or kill)\n",
        tag.c_str(), rank, delay_ms, run.proc.seconds, reference_seconds_);
    EXPECT_GT(killed, 0) << tag << ": the job ended before the kill: " << run.proc.Describe();
    EXPECT_TRUE(run.ok()) << tag << ": the job did not survive: " << run.proc.Describe();
    // The launcher reports the death and lets the job go on; the coordinator the failover.
    EXPECT_NE(run.proc.err.find("rank " + std::to_string(rank) + " (server " +
                                std::to_string(rank) + ") was killed by signal 9"),
              std::string::npos)
        << run.proc.Describe();
    EXPECT_NE(run.proc.err.find("goes on without it"), std::string::npos) << run.proc.Describe();
    EXPECT_NE(run.proc.err.find("server " + std::to_string(rank) + " removed"), std::string::npos)
        << run.proc.Describe();
    if (rank == 0) {  // the standby on rank 1 took over (ps/coordinator/coordinator_takeover.cc)
      const size_t at = run.proc.err.find("ferry coordinator (rank 1) took over from rank 0");
      EXPECT_NE(at, std::string::npos) << run.proc.Describe();
      if (at != std::string::npos) {
        std::printf("%s: %s\n", tag.c_str(),
                    run.proc.err.substr(at, run.proc.err.find('\n', at) - at).c_str());
      }
    }
    return bytes;
  }

  // The longest gap between consecutive evaluation lines beyond the median gap (ms), or -1.
  static int64_t StallMs(const std::string& metrics) {
    std::vector<double> at;
    for (const std::string& l : Lines(Slurp(metrics))) {
      auto j = nlohmann::json::parse(l, nullptr, false);
      if (j.is_object() && j.contains("elapsed_s") && j.value("event", "") != "final") {
        at.push_back(j["elapsed_s"].get<double>());
      }
    }
    if (at.size() < 3) return -1;
    std::vector<double> gaps;
    for (size_t i = 1; i < at.size(); ++i) gaps.push_back(at[i] - at[i - 1]);
    std::sort(gaps.begin(), gaps.end());
    return static_cast<int64_t>((gaps.back() - gaps[gaps.size() / 2]) * 1000);
  }

  static std::string Dashed(std::string s) {
    std::replace(s.begin(), s.end(), '_', '-');
    return s;
  }

  static void Report(const std::string& tag, const std::string& transport, const TrainRun& run,
                     bool same_bytes, bool killed) {
    const char* outcome = !killed       ? "not-killed"
                          : !run.ok()   ? "job-failed"
                          : !same_bytes ? "wrong-model"
                                        : "ok";
    const int64_t stall = StallMs(*dir_ / (tag + ".jsonl"));
    ferry::testing::WriteReliabilityLine(
        "RELIABILITY scenario=train-replicas-kill-" + Dashed(tag) + " backend=" + transport +
        " outcome=" + outcome + " ops=- errors=- bytes=- detect_ms=- drain_ms=- elapsed_ms=" +
        std::to_string(static_cast<int64_t>(run.proc.seconds * 1000)) +
        " proxy_bytes=- note=stall_ms=" + (stall < 0 ? std::string("-") : std::to_string(stall)) +
        (same_bytes ? ",same-model-bytes" : ",model-differs") + " error=" +
        ferry::testing::ReliabilityText(run.ok() ? "" : run.proc.err.substr(0, 200)) + "\n");
  }

  struct LauncherCase {
    const char* name;
    const char* driver_env;  // FERRY_RUN_MPIRUN / FERRY_RUN_SRUN (tests/train/meson.build)
    std::vector<std::string> env_and_options;  // env VAR=... then driver options
    const char* rank_env;
    int exit_code;         // the driver's, for a job that survived
    const char* launcher;  // what the driver says of the launcher's exit, or ""
    // The driver's arguments before "--": the test drivers take the rank count and a timeout.
    std::vector<std::string> driver_args = {"5", "--timeout", "150"};
  };

  static void KeepsTheJobUnder(const LauncherCase& c) {
    const std::string ref = reference_.count("ftrl") ? reference_["ftrl"] : Reference("ftrl");
    ASSERT_FALSE(ref.empty());
    const std::string driver = EnvOr(c.driver_env, "");
    // tests/train/meson.build sets FERRY_RUN_MPIRUN / FERRY_RUN_SRUN; run by hand, set them too.
    ASSERT_FALSE(driver.empty()) << "the " << c.name << " driver path is not set (" << c.driver_env
                                 << ")";
    const std::string tag = std::string("ftrl_") + c.name;
    const std::string metrics = *dir_ / (tag + ".jsonl");
    const std::string out = *dir_ / (tag + ".model");
    std::vector<std::string> argv = Cat({"env"}, c.env_and_options);
    argv = Cat(Cat(argv, {driver}), c.driver_args);
    argv = Cat(argv, {"--", TrainBin()});
    argv = Cat(argv, Job("ftrl", "tcp"));
    argv = Cat(argv, {"--replicas", "2", "--model-out", out, "--metrics-json", metrics,
                      "--progress", "never", "-q"});
    Clock::time_point training{};
    pid_t killed = -1;
    const int delay_ms = std::uniform_int_distribution<int>(0, 500)(rng_);
    auto killer = [&](pid_t) {
      if (killed > 0) return;
      if (training == Clock::time_point{}) {
        if (!Lines(Slurp(metrics)).empty()) training = Clock::now();
        return;
      }
      if (Clock::now() - training < std::chrono::milliseconds(delay_ms)) return;
      const pid_t pid = FindProcess(c.rank_env, metrics);
      if (pid > 0 && kill(pid, SIGKILL) == 0) killed = pid;
    };
    Proc p = Exec(argv, 240, killer);
    if (p.exit_code == 77) GTEST_SKIP() << c.name << ": skipped by its driver: " << p.out << p.err;
    TrainRun run;
    run.proc = p;
    const std::vector<std::string> lines = Lines(Slurp(metrics));
    if (!lines.empty()) run.final_line = nlohmann::json::parse(lines.back(), nullptr, false);
    const bool finished = run.final_line.is_object() && run.final_line["event"] == "final";
    if (finished && p.exit_code == c.exit_code) run.proc.exit_code = 0;  // as Report reads it
    const std::string bytes = Slurp(out);
    Report(tag, "tcp", run, bytes == ref, killed > 0);
    EXPECT_GT(killed, 0) << c.name << ": the job ended before the kill: " << p.Describe();
    EXPECT_TRUE(finished) << c.name << ": the job did not finish: " << p.Describe();
    EXPECT_EQ(p.exit_code, c.exit_code) << c.name << ": " << p.Describe();
    EXPECT_NE(p.err.find(c.launcher), std::string::npos) << c.name << ": " << p.Describe();
    EXPECT_EQ(bytes, ref) << c.name << ": the model differs";
    // Rank 0 runs the coordinator: the standby on rank 1 took over.
    // (The launchers may pass the ranks' stderr on as their stdout.)
    EXPECT_NE((p.out + p.err).find("ferry coordinator (rank 1) took over from rank 0"),
              std::string::npos)
        << c.name << ": " << p.Describe();
  }

  static TempDir* dir_;
  static std::string train_, test_;
  static uint64_t seed_;
  static std::mt19937_64 rng_;
  static double reference_seconds_;
  static std::map<std::string, std::string> reference_;  // model -> its reference bytes
};
TempDir* Replicas::dir_ = nullptr;
std::string Replicas::train_, Replicas::test_;
uint64_t Replicas::seed_ = 0;
std::mt19937_64 Replicas::rng_;
double Replicas::reference_seconds_ = 0;
std::map<std::string, std::string> Replicas::reference_;

TEST_F(Replicas, FtrlSurvivesAKilledServerWithTheSameModelBytes) {
  const std::string ref = Reference("ftrl");
  ASSERT_FALSE(ref.empty());
  EXPECT_EQ(KillOneServer("ftrl", "tcp", 1), ref) << "server 1 killed over tcp";
  EXPECT_EQ(KillOneServer("ftrl", "ucx", 2), ref) << "server 2 killed over ucx";
}

// Rank 0 runs the coordinator and server 0: killed, the standby coordinator on rank 1 takes over
// (every member rejoins it with what it sent and heard), server 0 fails over like any server, and
// the model is the reference's byte for byte (ps/coordinator/coordinator.h, "Standby").
TEST_F(Replicas, FtrlSurvivesAKilledCoordinatorRankWithTheSameModelBytes) {
  const std::string ref = reference_.count("ftrl") ? reference_["ftrl"] : Reference("ftrl");
  ASSERT_FALSE(ref.empty());
  EXPECT_EQ(KillOneServer("ftrl", "tcp", 0), ref) << "rank 0 killed over tcp";
  EXPECT_EQ(KillOneServer("ftrl", "ucx", 0), ref) << "rank 0 killed over ucx";
  // Periodic checkpoints go on through the takeover (one in flight is dropped, the next boundary
  // takes one), and the model is still the reference's.
  const std::string ck = *dir_ / "rank0.ck";
  EXPECT_EQ(KillOneServer("ftrl", "tcp", 0, {"--checkpoint-dir", ck, "--checkpoint-every", "40"},
                          "_checkpoints"),
            ref)
      << "rank 0 killed over tcp with periodic checkpoints";
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(ck) / "LATEST"));
}

// Two shard servers per server rank (--server-threads 2): the shares only decide where a row
// lives, so the model is the reference's byte for byte; and a killed rank takes both of its
// shard servers down at once, which fail over together (their chains' next copies are on other
// ranks).
TEST_F(Replicas, ServerThreadsKeepTheModelBytesThroughAKilledRank) {
  const std::string ref = Reference("ftrl");
  ASSERT_FALSE(ref.empty());
  EXPECT_EQ(KillOneServer("ftrl", "tcp", 1, {"--server-threads", "2"}, "_threads2"), ref)
      << "server rank 1 (shard servers 1 and 4) killed over tcp";
}

TEST_F(Replicas, MlpSurvivesAKilledServerWithTheSameModelBytes) {
  const std::string ref = Reference("mlp");
  ASSERT_FALSE(ref.empty());
  EXPECT_EQ(KillOneServer("mlp", "tcp", 2), ref) << "server 2 killed over tcp";
}

// Repair (--spares 1, ps/job/chain.h "Repairs"): server 1 is killed; the spare (server 3, rank 5)
// adopts its shards 1 and 0, copies them from their live replicas (servers 2 and 0) and joins
// their chains; once the coordinator reports the join (the job's stderr, read as it is written
// through the launcher's fd 2), server 2 is killed too, which leaves shard 1 on the spare alone.
// The job goes on and its model is the reference's byte for byte. Without the repair the second
// kill ends the job.
TEST_F(Replicas, FtrlSurvivesTwoKilledServersWithASpareBetween) {
  const std::string ref = reference_.count("ftrl") ? reference_["ftrl"] : Reference("ftrl");
  ASSERT_FALSE(ref.empty());
  const std::string tag = "ftrl_tcp_spare";
  const std::string metrics = *dir_ / (tag + ".jsonl");
  const std::string out = *dir_ / (tag + ".model");
  Clock::time_point training{}, joined_at{};
  int killed = 0;
  auto killer = [&](pid_t launcher) {
    const auto now = Clock::now();
    if (training == Clock::time_point{}) {
      if (!Lines(Slurp(metrics)).empty()) training = now;
      return;
    }
    if (killed >= 2) return;
    const int rank = killed == 0 ? 1 : 2;
    if (killed == 0 && now < training + std::chrono::milliseconds(100)) return;
    if (killed == 1) {
      if (joined_at == Clock::time_point{}) {
        const std::string err = Slurp("/proc/" + std::to_string(launcher) + "/fd/2");
        if (err.find("spare server 3 joined its chains") == std::string::npos) return;
        joined_at = now;
      }
      // A few steps on the repaired chains first (ms each), then the second kill.
      if (now < joined_at + std::chrono::milliseconds(100)) return;
    }
    const pid_t pid = RankPid(launcher, rank);
    if (pid > 0 && kill(pid, SIGKILL) == 0) ++killed;
  };
  TrainRun run = Train(
      *dir_, tag, Cat(Job("ftrl", "tcp"), {"--replicas", "2", "--spares", "1", "--model-out", out}),
      180, killer);
  const std::string bytes = Slurp(out);
  Report(tag, "tcp", run, bytes == ref, killed == 2);
  ASSERT_EQ(killed, 2) << "the job ended before both kills (the second waits for the spare's "
                          "join): "
                       << run.proc.Describe();
  EXPECT_TRUE(run.ok()) << "the job did not survive: " << run.proc.Describe();
  EXPECT_NE(run.proc.err.find("spare server 3 adopts server 1's shards"), std::string::npos)
      << run.proc.Describe();
  const size_t joined = run.proc.err.find("spare server 3 joined its chains");
  EXPECT_NE(joined, std::string::npos) << run.proc.Describe();
  if (joined != std::string::npos) {
    std::printf("%s: %s\n", tag.c_str(),
                run.proc.err.substr(joined, run.proc.err.find('\n', joined) - joined).c_str());
  }
  EXPECT_NE(run.proc.err.find("server 2 removed"), std::string::npos) << run.proc.Describe();
  EXPECT_EQ(bytes, ref) << "the model differs after the repair and the second kill";
}

// Under ferry-launch and the real launchers (tests/launch drivers, env MPIRUN_ARGS / SRUN_ARGS for
// their options):
// mpirun stops every rank when one dies unless told to recover (--enable-recovery), then exits 0;
// srun stops the step unless --kill-on-bad-exit=0 (the driver sets 1), and then still exits with
// the killed task's status (137, which the driver turns into its own exit 1) although the job
// finished. Same job, rank 0 killed (the coordinator and server 0: the standby on rank 1 takes
// over). One case per launcher: a driver's exit 77 (launcher
// missing, Slurm not starting) skips that case with the driver's reason.
TEST_F(Replicas, MpirunWithRecoveryKeepsTheJobWithTheSameModelBytes) {
  KeepsTheJobUnder({"mpirun",
                    "FERRY_RUN_MPIRUN",
                    {"MPIRUN_ARGS=--enable-recovery"},
                    "OMPI_COMM_WORLD_RANK=0",
                    0,
                    ""});
}

TEST_F(Replicas, FerryLaunchKeepsTheJobWithTheSameModelBytes) {
  KeepsTheJobUnder({"ferry-launch",
                    "FERRY_LAUNCH",
                    {},
                    "FERRY_RANK=0",
                    0,
                    "the job goes on without it (replicas 2; rank 1 takes over as the coordinator)",
                    {"--servers", "3", "--workers", "2", "--replicas", "2"}});
}

TEST_F(Replicas, SrunKeepsTheJobWithTheSameModelBytes) {
  KeepsTheJobUnder({"srun",
                    "FERRY_RUN_SRUN",
                    {"SRUN_ARGS=--kill-on-bad-exit=0"},
                    "SLURM_PROCID=0",
                    1,
                    "the launch exited with status 137"});
}

// Admission and eviction with replicas (ps/server/server_records.cc): each shard's head decides,
// its replica follows. Two epochs of lr with --admit-min-count and --evict-unseen (a tick of
// 25 ms: rows unseen for 250 ms go, so the run of ~2.5 s evicts) on 3 servers, every shard on 2:
// the run finishes and scores like the same run without replicas (eviction timing differs
// between the two runs, so the scores are close, not equal). With rows unseen for 50 ms, a
// replicated run slowed by other work beside it (CI's background builds) evicted enough more
// than the plain one to score 0.04 worse (AUC 0.692).
TEST_F(Replicas, AdmissionAndEvictionRunWithReplicas) {
  std::vector<std::string> job = {"--model", "lr", "--train", train_, "--test", test_};
  job = Cat(job, {"--epochs", "2", "--batch-size", "64", "--workers", "2", "--servers", "3"});
  job = Cat(job, {"--seed", "5", "--transport", "tcp", "--consistency", "bsp"});
  job = Cat(job, {"--admit-min-count", "2", "--evict-unseen", "0.25", "--evict-tick", "0.025"});
  TrainRun plain = Train(*dir_, "dynamic_plain", job, 120);
  ASSERT_TRUE(plain.ok()) << plain.proc.Describe();
  TrainRun r = Train(*dir_, "dynamic_replicas", Cat(job, {"--replicas", "2"}), 120);
  ASSERT_TRUE(r.ok()) << r.proc.Describe();
  EXPECT_GT(r.auc(), 0.7) << r.proc.Describe();
  EXPECT_NEAR(r.logloss(), plain.logloss(), 0.03) << r.proc.Describe();
}

TEST_F(Replicas, RefusesMoreReplicasThanServers) {
  TrainRun r = Train(*dir_, "too_many", Cat(Job("lr", "tcp"), {"--replicas", "4"}), 60);
  EXPECT_NE(r.proc.exit_code, 0);
  EXPECT_NE(r.proc.err.find("replicas 4 must be 1..3"), std::string::npos) << r.proc.Describe();
}

}  // namespace
}  // namespace ferry::train_test
