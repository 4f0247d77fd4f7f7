// A stream under ferry-launch and mpirun (tools/train/stream_ranks.h): rank 0 reads it (a FIFO
// it opens, or mpirun's standard input, which mpirun gives rank 0) and deals it to the worker
// ranks over TCP (its own worker, when colocated, over a pipe). Every line is trained exactly
// once, --max-samples cuts exactly, SIGINT to rank 0 ends the job cleanly, a killed worker ends
// the job with the reason instead of a hang, and --train - under ferry-launch (whose ranks have
// no standard input) is refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/train/train_test_util.h"

namespace ferry::train_test {
namespace {

using ::testing::HasSubstr;

std::string LaunchBin() {
  return EnvOr("FERRY_LAUNCH", "");
}

// ferry-train's flags for a stream from `input`, metrics to `metrics`.
std::vector<std::string> TrainStream(const std::string& input, const std::string& metrics,
                                     const std::vector<std::string>& more = {}) {
  return Cat({TrainBin(), "--train", input, "--model", "ftrl", "--transport", "tcp", "--window",
              "10000", "--metrics-json", metrics, "--progress", "never"},
             more);
}

// `samples` lines written into a new FIFO by a ferry-gen in the background, then ferry-launch
// (2 servers, 2 workers, and `rule`) running `train`: "GEN ... > FIFO & exec ferry-launch ... --
// TRAIN".
Proc LaunchOverFifo(const TempDir& dir, uint64_t samples, const std::vector<std::string>& train,
                    const std::function<void(pid_t)>& while_running = nullptr,
                    const std::string& rule = "servers-first") {
  const std::string script =
      "g=$1 n=$2 f=$3; shift 3; \"$g\" --stream --samples \"$n\" --fields 8 --seed 11 > \"$f\" & "
      "exec \"$@\"";
  return Exec(Cat({"/bin/sh", "-c", script, "sh", GenBin(), std::to_string(samples), dir / "fifo",
                   LaunchBin(), "--servers", "2", "--workers", "2", "--rule", rule, "--"},
                  train),
              90, while_running);
}

// Sends `signal` to rank `rank` of the launcher once worker 0 has written its first window;
// *sent tells whether it did.
std::function<void(pid_t)> SignalAfterFirstWindow(const std::string& metrics, int rank, int signal,
                                                  bool* sent) {
  return [=](pid_t launcher) {
    if (*sent || Slurp(metrics).find("\"window\"") == std::string::npos) return;
    const pid_t pid = RankPid(launcher, rank);
    if (pid > 0) *sent = ::kill(pid, signal) == 0;
  };
}

struct Metrics {
  uint64_t window_samples = 0;  // summed over the windows worker 0 merged from every worker
  nlohmann::json final_line;
};
Metrics ReadMetrics(const std::string& path) {
  Metrics m;
  for (const nlohmann::json& j : JsonLines(path)) {
    if (j.value("event", "") == "window") m.window_samples += j.value("window_samples", 0ull);
    if (j.value("event", "") == "final") m.final_line = j;
  }
  return m;
}

class LauncherStreams : public ::testing::Test {
 protected:
  void SetUp() override {
    if (LaunchBin().empty()) GTEST_SKIP() << "FERRY_LAUNCH not set (run through meson test)";
    ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  }
  TempDir dir_;
};

TEST_F(LauncherStreams, FerryLaunchDealsAFifoToTwoWorkersEveryLineOnce) {
  const std::string metrics = dir_ / "m.jsonl";
  Proc p = LaunchOverFifo(dir_, 40000, TrainStream(dir_ / "fifo", metrics));
  ASSERT_EQ(p.exit_code, 0) << p.Describe();
  EXPECT_THAT(p.err, HasSubstr("the stream gave 40000 lines (end of input; " + dir_ / "fifo"));
  const Metrics m = ReadMetrics(metrics);
  EXPECT_EQ(m.window_samples, 40000u);  // every line scored once, whichever worker had it
  ASSERT_TRUE(m.final_line.is_object()) << p.Describe();
  EXPECT_EQ(m.final_line.value("samples", 0ull), 40000u);  // and trained once
  EXPECT_EQ(m.final_line.value("workers", 0), 2);
  std::printf("ferry-launch, 40000 lines: %.1f s\n", p.seconds);
}

// Colocated: rank 0 is server 0, the coordinator and worker 0; its own share goes through a pipe.
TEST_F(LauncherStreams, ColocatedRankZeroDealsToItselfAndTheOtherWorker) {
  const std::string metrics = dir_ / "m.jsonl";
  Proc p = LaunchOverFifo(dir_, 30000, TrainStream(dir_ / "fifo", metrics), nullptr, "colocated");
  ASSERT_EQ(p.exit_code, 0) << p.Describe();
  const Metrics m = ReadMetrics(metrics);
  EXPECT_EQ(m.window_samples, 30000u);
  ASSERT_TRUE(m.final_line.is_object()) << p.Describe();
  EXPECT_EQ(m.final_line.value("samples", 0ull), 30000u);
  EXPECT_EQ(m.final_line.value("workers", 0), 2);
}

TEST_F(LauncherStreams, MaxSamplesCutsExactlyAcrossTheWorkers) {
  const std::string metrics = dir_ / "m.jsonl";
  Proc p =
      LaunchOverFifo(dir_, 200000, TrainStream(dir_ / "fifo", metrics, {"--max-samples", "12345"}));
  ASSERT_EQ(p.exit_code, 0) << p.Describe();
  EXPECT_THAT(p.err, HasSubstr("the stream gave 12345 lines (--max-samples;"));
  const Metrics m = ReadMetrics(metrics);
  EXPECT_EQ(m.window_samples, 12345u);
  EXPECT_EQ(m.final_line.value("samples", 0ull), 12345u) << p.Describe();
}

TEST_F(LauncherStreams, SigintToRankZeroEndsTheStreamAndTheJobCleanly) {
  const std::string metrics = dir_ / "m.jsonl";
  bool sent = false;
  Proc p = LaunchOverFifo(dir_, 100000000, TrainStream(dir_ / "fifo", metrics),
                          SignalAfterFirstWindow(metrics, 0, SIGINT, &sent));
  ASSERT_TRUE(sent) << p.Describe();
  ASSERT_EQ(p.exit_code, 0) << p.Describe();
  EXPECT_THAT(p.err, HasSubstr("lines (stopped;"));
  const Metrics m = ReadMetrics(metrics);
  ASSERT_TRUE(m.final_line.is_object()) << p.Describe();
  EXPECT_GE(m.final_line.value("samples", 0ull), 10000u);
  EXPECT_EQ(m.final_line.value("samples", 0ull), m.window_samples);
}

TEST_F(LauncherStreams, AKilledWorkerEndsTheJobNamingItNotAHang) {
  const std::string metrics = dir_ / "m.jsonl";
  bool killed = false;  // worker 1 is rank 3 (servers-first: servers 0, 1, workers 2, 3)
  Proc p = LaunchOverFifo(dir_, 100000000, TrainStream(dir_ / "fifo", metrics),
                          SignalAfterFirstWindow(metrics, 3, SIGKILL, &killed));
  ASSERT_TRUE(killed) << p.Describe();
  EXPECT_FALSE(p.timed_out) << p.Describe();
  EXPECT_NE(p.exit_code, 0) << p.Describe();
  EXPECT_THAT(p.err, HasSubstr("rank 3 (worker 1) was killed by signal 9")) << p.Describe();
}

TEST_F(LauncherStreams, StdinUnderFerryLaunchIsRefusedNamingTheWayOut) {
  Proc p = Exec(Cat({LaunchBin(), "--servers", "1", "--workers", "2", "--"},
                    TrainStream("-", dir_ / "m.jsonl")),
                60);
  EXPECT_NE(p.exit_code, 0) << p.Describe();
  EXPECT_THAT(p.err, HasSubstr("ferry-launch gives no rank its standard input")) << p.Describe();
}

// mpirun gives its standard input to rank 0 (and /dev/null to the others), so `--train -` works
// there as without a launcher. mpirun is run directly: tests/launch/run-mpirun.sh starts it in
// the background, where a shell gives it /dev/null instead of its standard input.
TEST_F(LauncherStreams, MpirunDealsRankZerosStandardInputEveryLineOnce) {
  if (!OnPath("mpirun")) GTEST_SKIP() << "mpirun not found (apt-get install openmpi-bin)";
  const std::string metrics = dir_ / "m.jsonl";
  std::vector<std::string> mpirun = {"mpirun", "--oversubscribe", "-np", "4"};
  if (::geteuid() == 0) mpirun.insert(mpirun.begin() + 1, "--allow-run-as-root");
  const std::string script =
      "g=$1; shift; \"$g\" --stream --samples 30000 --fields 8 --seed 11 | \"$@\"";
  Proc p = Exec(Cat(Cat({"/bin/sh", "-c", script, "sh", GenBin()}, mpirun),
                    TrainStream("-", metrics, {"--servers", "2"})),
                90);
  ASSERT_EQ(p.exit_code, 0) << p.Describe();
  EXPECT_THAT(p.err, HasSubstr("the stream gave 30000 lines (end of input; stdin)"));
  const Metrics m = ReadMetrics(metrics);
  EXPECT_EQ(m.window_samples, 30000u);
  ASSERT_TRUE(m.final_line.is_object()) << p.Describe();
  EXPECT_EQ(m.final_line.value("samples", 0ull), 30000u);
  EXPECT_EQ(m.final_line.value("workers", 0), 2);
  std::printf("mpirun, 30000 lines from stdin: %.1f s\n", p.seconds);
}

}  // namespace
}  // namespace ferry::train_test
