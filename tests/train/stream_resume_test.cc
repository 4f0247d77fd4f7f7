// A followed directory resumes exactly once (auto_settings.h LockstepStream: --follow DIR with
// --consistency bsp; models/train/trainer_lockstep.cc). Three runs of one job over the same four
// files must give one model, byte for byte:
//   the reference: two files there at the start, the other two renamed in while it runs;
//   a run with checkpoints whose worker 1 is killed with SIGKILL a random moment after the first
//   checkpoint (all files there), then `--resume` of its checkpoint directory over another
//   transport.
// So the files a worker trains by a clock do not depend on when they arrived, and no line is lost
// or trained twice across a kill. The same for one tailed file (--follow FILE) appended to. The
// random moment comes from one seed, printed; FERRY_RESUME_SEED=N replays it.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tests/train/train_test_util.h"

namespace ferry::train_test {
namespace {

using Clock = std::chrono::steady_clock;

class FollowResume : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string all = *dir_ / "all.svm";
    Generate(all, *dir_ / "test.svm",
             {"--fields", "10", "--features", "20000", "--samples", "40000", "--test-samples",
              "100", "--seed", "21"});
    // Four parts of 10,000 lines; part 2 ends without its last '\n' (the dealer adds it: its
    // last line must not run into part 3's first).
    const std::vector<std::string> lines = Lines(Slurp(all));
    ASSERT_EQ(lines.size(), 40000u);
    for (int p = 0; p < 4; ++p) {
      std::string text;
      for (size_t i = p * 10000; i < (p + 1) * 10000u; ++i) text += lines[i] + "\n";
      if (p == 2) text.pop_back();
      parts_.push_back(text);
    }
    seed_ = SeedFromEnv("FERRY_RESUME_SEED");
    rng_.seed(seed_);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // A folder holding parts [0, n) under their final names.
  static std::string Folder(const std::string& name, int n) {
    const std::string d = *dir_ / name;
    std::filesystem::create_directories(d);
    for (int p = 0; p < n; ++p) Place(d, p);
    return d;
  }
  // Writes part p beside the folder, then renames it in: complete the moment it appears.
  static void Place(const std::string& folder, int p) {
    const std::string tmp = folder + "/.part-" + std::to_string(p);
    WriteText(tmp, parts_[p]);
    std::filesystem::rename(tmp, folder + "/part-" + std::to_string(p));
  }

  static std::vector<std::string> Job(const std::string& folder, const std::string& transport) {
    return {"--model",      "ftrl",      "--follow", folder,        "--consistency",
            "bsp",          "--workers", "2",        "--servers",   "2",
            "--batch-size", "64",        "--seed",   "5",           "--idle-exit",
            "1.5",          "--window",  "10000",    "--transport", transport};
  }

  static void AppendText(const std::string& path, const std::string& text) {
    std::FILE* f = std::fopen(path.c_str(), "ab");
    ASSERT_NE(f, nullptr) << path;
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }

  // The uninterrupted run over `input` (tcp), its model to *dir_/NAME.bin: parts 2 and 3 arrive
  // through `arrive` 300 and 600 ms into it (each worker waits for its next part while the other
  // waits at the clock).
  static TrainRun Reference(const std::string& name, const std::string& input,
                            const std::function<void(int)>& arrive) {
    const Clock::time_point t0 = Clock::now();
    int next = 2;
    TrainRun ref = Train(
        *dir_, name, Cat(Job(input, "tcp"), {"--model-out", *dir_ / (name + ".bin")}), 60,
        [&](pid_t) {
          const auto ms =
              std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
          if (next < 4 && ms >= 300 * (next - 1)) arrive(next++);
        });
    EXPECT_EQ(next, 4) << "the run ended before every part arrived";
    return ref;
  }

  // A run over `input` with checkpoints whose worker 1 (rank 3) is killed a random 0-200 ms after
  // the first checkpoint, then `--resume` of its checkpoint directory over another transport:
  // its model must be `want`, the uninterrupted run's.
  static void KillAndResume(const std::string& input, const std::string& name,
                            const std::string& want) {
    ASSERT_FALSE(want.empty());
    const std::string ck = *dir_ / (name + ".ck");
    const int delay_ms = std::uniform_int_distribution<int>(0, 200)(rng_);
    Clock::time_point first_checkpoint{};
    pid_t killed = -1;
    TrainRun crashed =
        Train(*dir_, name + "_killed",
              Cat(Job(input, "ucx"), {"--checkpoint-dir", ck, "--checkpoint-every", "40"}), 60,
              [&](pid_t launcher) {
                if (killed > 0) return;
                if (first_checkpoint == Clock::time_point{}) {
                  std::error_code ec;
                  if (std::filesystem::exists(ck + "/LATEST", ec)) first_checkpoint = Clock::now();
                  return;
                }
                if (Clock::now() - first_checkpoint < std::chrono::milliseconds(delay_ms)) return;
                const pid_t pid = RankPid(launcher, 3);
                if (pid > 0 && kill(pid, SIGKILL) == 0) killed = pid;
              });
    std::printf("seed %llu: %s: worker 1 killed %d ms after the first checkpoint; newest then: %s",
                static_cast<unsigned long long>(seed_), name.c_str(), delay_ms,
                Slurp(ck + "/LATEST").c_str());
    ASSERT_GT(killed, 0) << "the job ended before the kill: " << crashed.proc.Describe();
    EXPECT_NE(crashed.proc.exit_code, 0) << crashed.proc.Describe();
    EXPECT_NE(crashed.proc.err.find("rank 3"), std::string::npos) << crashed.proc.Describe();

    const std::string out = *dir_ / (name + "_resumed.bin");
    TrainRun resumed = Train(*dir_, name + "_resumed",
                             Cat(Job(input, "tcp"), {"--resume", ck, "--model-out", out}), 60);
    ASSERT_TRUE(resumed.ok()) << resumed.proc.Describe();
    // It went on from the checkpoint: fewer samples than the whole stream, not a fresh start.
    const uint64_t after = resumed.final_line.value("samples", uint64_t{0});
    EXPECT_GT(after, 0u) << resumed.proc.Describe();
    EXPECT_LT(after, 40000u) << resumed.proc.Describe();
    EXPECT_TRUE(Slurp(out) == want) << "the resumed model differs from the uninterrupted one";
  }

  static TempDir* dir_;
  static std::vector<std::string> parts_;
  static uint64_t seed_;
  static std::mt19937_64 rng_;
};
TempDir* FollowResume::dir_ = nullptr;
std::vector<std::string> FollowResume::parts_;
uint64_t FollowResume::seed_ = 0;
std::mt19937_64 FollowResume::rng_;

TEST_F(FollowResume, KilledWorkerResumesToTheModelOfTheUninterruptedRun) {
  // The reference: parts 2 and 3 renamed into the folder while it runs.
  const std::string live = Folder("live", 2);
  TrainRun ref = Reference("ref", live, [&](int p) { Place(live, p); });
  ASSERT_TRUE(ref.ok()) << ref.proc.Describe();
  EXPECT_EQ(ref.final_line.value("samples", 0), 40000) << ref.proc.Describe();
  // Windows every ceil(10000 / 128) clocks, the last one partial: every sample scored once.
  uint64_t scored = 0, windows = 0;
  for (const nlohmann::json& l : JsonLines(*dir_ / "ref.jsonl")) {
    if (l.value("event", "") != "window") continue;
    ++windows;
    scored += l.value("window_samples", uint64_t{0});
  }
  EXPECT_EQ(scored, 40000u);
  EXPECT_EQ(windows, 4u);

  KillAndResume(Folder("all", 4), "all", Slurp(*dir_ / "ref.bin"));
}

// A tailed file (--follow FILE) in lockstep: every worker reads it whole and keeps its batches'
// lines. The reference: half the file there at the start, the rest appended while it runs; a run
// over the whole file whose worker 1 is killed after its first checkpoint; its resume: the
// reference's model, byte for byte.
TEST_F(FollowResume, ATailedFileResumesToTheModelOfTheUninterruptedRun) {
  auto part = [](int p) {
    return parts_[p].back() == '\n' ? parts_[p] : parts_[p] + "\n";  // appended: whole lines
  };
  const std::string live = *dir_ / "live.svm";
  WriteText(live, part(0) + part(1));
  TrainRun ref = Reference("tail_ref", live, [&](int p) { AppendText(live, part(p)); });
  ASSERT_TRUE(ref.ok()) << ref.proc.Describe();
  EXPECT_EQ(ref.final_line.value("samples", 0), 40000) << ref.proc.Describe();

  const std::string all = *dir_ / "all.tail.svm";
  WriteText(all, part(0) + part(1) + part(2) + part(3));
  KillAndResume(all, "tail", Slurp(*dir_ / "tail_ref.bin"));
}

// The sum of the worker positions a checkpoint recorded (ps/job/checkpoint.h: "position I P"
// lines of its MANIFEST), and its clock.
std::pair<uint64_t, uint64_t> Positions(const std::string& checkpoint) {
  uint64_t sum = 0, clock = 0;
  for (const std::string& line : Lines(Slurp(checkpoint + "/MANIFEST"))) {
    unsigned long long a = 0, b = 0;
    if (std::sscanf(line.c_str(), "position %llu %llu", &a, &b) == 2) sum += b;
    if (std::sscanf(line.c_str(), "clock %llu", &a) == 1) clock = a;
  }
  return {sum, clock};
}

// The first SIGINT stops every worker's following (the launcher closes their stop pipes): the
// job ends cleanly with its model and a final checkpoint at its last clock (off the
// --checkpoint-every schedule), whose positions are every sample the run trained. Two more files
// arrive; resumed from that checkpoint, the job trains the rest exactly once: the samples of the
// resumed run and the positions the checkpoint recorded add up to the lines of the folder.
TEST_F(FollowResume, SigintStopsFollowingCleanlyAndAResumeTrainsTheRestOnce) {
  const std::string all = Folder("stopped", 2);
  const std::string ck = *dir_ / "stopped.ck";
  std::vector<std::string> job = Job(all, "tcp");
  for (size_t i = 0; i < job.size(); ++i) {
    if (job[i] == "--idle-exit") job[i + 1] = "0";  // follow for ever: only the signal ends it
  }
  bool signalled = false;
  const std::string out = *dir_ / "stopped.bin";
  TrainRun stopped =
      Train(*dir_, "stopped",
            Cat(job, {"--checkpoint-dir", ck, "--checkpoint-every", "40", "--model-out", out}), 60,
            [&](pid_t launcher) {
              std::error_code ec;
              if (!signalled && std::filesystem::exists(ck + "/LATEST", ec)) {
                signalled = kill(launcher, SIGINT) == 0;
              }
            });
  ASSERT_TRUE(signalled);
  ASSERT_TRUE(stopped.ok()) << stopped.proc.Describe();
  EXPECT_FALSE(Slurp(out).empty());
  const std::string latest = ck + "/" + Lines(Slurp(ck + "/LATEST")).front();
  const auto [positions, clock] = Positions(latest);
  EXPECT_GT(clock, 0u);
  const uint64_t trained = stopped.final_line.value("samples", uint64_t{0});
  EXPECT_EQ(positions, trained) << "the newest checkpoint (clock " << clock
                                << ") is not the stop's: its positions miss samples trained";
  Place(all, 2);
  Place(all, 3);
  TrainRun resumed =
      Train(*dir_, "stopped_resumed", Cat(Job(all, "ucx"), {"--resume", latest}), 60);
  ASSERT_TRUE(resumed.ok()) << resumed.proc.Describe();
  EXPECT_EQ(positions + resumed.final_line.value("samples", uint64_t{0}), 40000u)
      << "checkpoint at clock " << clock << " with " << positions << " samples read";
}

// Under ferry-launch nothing is dealt either: each worker rank follows the folder itself, and the
// model is the local cluster's, byte for byte.
TEST_F(FollowResume, UnderFerryLaunchEachWorkerRankFollowsTheFolderToTheSameModel) {
  const std::string launch = EnvOr("FERRY_LAUNCH", "");
  ASSERT_FALSE(launch.empty()) << "FERRY_LAUNCH not set (run through meson test)";
  const std::string all = Folder("launched", 4);
  const std::string local = *dir_ / "local.bin", launched = *dir_ / "launched.bin";
  TrainRun ref = Train(*dir_, "local", Cat(Job(all, "tcp"), {"--model-out", local}), 60);
  ASSERT_TRUE(ref.ok()) << ref.proc.Describe();
  Proc p =
      Exec(Cat(Cat({launch, "--servers", "2", "--workers", "2", "--", TrainBin()}, Job(all, "tcp")),
               {"--model-out", launched, "-q", "--progress", "never"}),
           60);
  ASSERT_EQ(p.exit_code, 0) << p.Describe();
  const std::string want = Slurp(local);
  ASSERT_FALSE(want.empty());
  EXPECT_TRUE(Slurp(launched) == want) << "ferry-launch's model differs from the local cluster's";
}

TEST_F(FollowResume, RefusesWhatCannotResume) {
  const std::string all = Folder("refuse", 4);
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      // A pipe is read once: no checkpoints without a followed directory in lockstep.
      {{"--model", "ftrl", "--train", "-", "--consistency", "bsp", "--checkpoint-dir",
        *dir_ / "x.ck"},
       "works with --follow DIR"},
      {{"--model", "ftrl", "--train", "-", "--resume", *dir_ / "x.ck"},
       "--checkpoint-dir and --resume need --consistency bsp and --follow DIR"},
      {{"--model", "ftrl", "--train", "-", "--consistency", "bsp"}, "works with --follow DIR"},
      {Cat(Job(all, "tcp"), {"--max-samples", "1000"}), "--max-samples is not supported"},
      {Cat(Job(all, "tcp"), {"--window-seconds", "2"}), "--window-seconds is not supported"},
  };
  for (const Case& c : cases) {
    TrainRun r = Train(*dir_, "refuse_case", c.args, 30);
    EXPECT_NE(r.proc.exit_code, 0) << r.proc.Describe();
    EXPECT_FALSE(r.proc.timed_out) << r.proc.Describe();
    EXPECT_NE(r.proc.err.find(c.says), std::string::npos)
        << "expected '" << c.says << "' in: " << r.proc.Describe();
  }
}

// Whether process `pid` has `path` open (its /proc/PID/fd links).
bool HasOpen(pid_t pid, const std::string& path) {
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::error_code rec;
    if (std::filesystem::read_symlink(e.path(), rec) == path) return true;
  }
  return false;
}

// A file that arrives after a later name was seen would move every later file to another
// worker: the job fails naming both, it does not train on.
TEST_F(FollowResume, AFileArrivingOutOfNameOrderFailsTheJob) {
  const std::string d = *dir_ / "order";
  std::filesystem::create_directories(d);
  WriteText(d + "/b", parts_[0]);
  // "a" comes once a worker's rank has "b" open (their first listing, only "b", is done), or
  // 1.5 s after both ranks exist if that went unseen; worker 1, with no file, waits for
  // --idle-exit (4 s here) meanwhile. A fixed 500 ms was too short under ASan on a loaded
  // machine: "a" arrived before the first listing and the job trained on both, in order.
  std::vector<std::string> args = Job(d, "tcp");
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--idle-exit") args[i + 1] = "4";
  }
  bool placed = false;
  Clock::time_point started{};
  TrainRun r = Train(*dir_, "order", args, 30, [&](pid_t launcher) {
    if (placed) return;
    const pid_t w0 = RankPid(launcher, 2), w1 = RankPid(launcher, 3);
    if (started == Clock::time_point{}) {
      if (w0 > 0 && w1 > 0) started = Clock::now();
      return;
    }
    const bool listed = HasOpen(w0, d + "/b") || HasOpen(w1, d + "/b");
    if (listed || Clock::now() - started > std::chrono::milliseconds(1500)) {
      WriteText(d + "/.a", parts_[1]);
      std::filesystem::rename(d + "/.a", d + "/a");
      placed = true;
    }
  });
  EXPECT_TRUE(placed);
  EXPECT_NE(r.proc.exit_code, 0) << r.proc.Describe();
  EXPECT_FALSE(r.proc.timed_out) << r.proc.Describe();
  EXPECT_NE(r.proc.err.find("a appeared after b and sorts before it"), std::string::npos)
      << r.proc.Describe();
}

}  // namespace
}  // namespace ferry::train_test
