// Exactly-once restore (ferry-train --checkpoint-dir / --resume; ps/job/checkpoint.h). A bsp run
// with fixed seeds writes a periodic checkpoint every few batches and is killed with SIGKILL at a
// random moment after its first one: a server, a worker, or rank 0 (server 0 and the
// coordinator). The job must fail naming the killed rank; `--resume DIR` then finishes it, and
// the final model FILE equals the uninterrupted run's byte for byte: no update lost, none applied
// twice. Resuming with another server count moves the rows to their new owners and still gives
// the same bytes; resuming over another transport too (the bytes do not depend on it).
//
// The random moments come from one seed, printed; FERRY_RESUME_SEED=N replays them.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include "tests/train/train_test_util.h"

namespace ferry::train_test {
namespace {

class Resume : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    train_ = *dir_ / "train.svm";
    Generate(train_, *dir_ / "test.svm",
             {"--fields", "10", "--features", "20000", "--samples", "40000", "--test-samples",
              "1000", "--seed", "21"});
    seed_ = SeedFromEnv("FERRY_RESUME_SEED");
    rng_.seed(seed_);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // The job every run of `model` shares: 2 workers, bsp, 2 epochs of ~313 batches; `change`
  // replaces some of those flags' values.
  static std::vector<std::string> Job(const std::string& model,
                                      const std::map<std::string, std::string>& change = {}) {
    std::map<std::string, std::string> flags = {
        {"--model", model}, {"--train", train_}, {"--consistency", "bsp"}, {"--batch-size", "64"},
        {"--epochs", "2"},  {"--workers", "2"},  {"--hidden", "16,8"},     {"--seed", "5"}};
    for (const auto& [k, v] : change) flags[k] = v;
    std::vector<std::string> args;
    for (const auto& [k, v] : flags) args.insert(args.end(), {k, v});
    return args;
  }

  // The uninterrupted run's model file (without checkpoints: they must not change a bit).
  static std::string Reference(const std::string& model,
                               const std::map<std::string, std::string>& change = {}) {
    const std::string out = *dir_ / (model + ".ref");
    TrainRun r = Train(*dir_, model + "_ref", Cat(Job(model, change), {"--model-out", out}));
    EXPECT_TRUE(r.ok()) << r.proc.Describe();
    return Slurp(out);
  }

  // Runs the job with a checkpoint every 40 batches over `transport` and SIGKILLs `rank` a
  // random 0-400 ms after `trigger` (a file of the checkpoint directory) appeared; then resumes
  // it with `resume_args`. Returns the resumed run's model file.
  static std::string KillAndResume(const std::string& model, const std::string& transport, int rank,
                                   const std::vector<std::string>& resume_args,
                                   const std::map<std::string, std::string>& change = {},
                                   const std::string& trigger = "LATEST") {
    const std::string tag = model + "_" + transport + "_rank" + std::to_string(rank);
    const std::string ck = *dir_ / (tag + ".ck");
    const int delay_ms = std::uniform_int_distribution<int>(0, 400)(rng_);
    pid_t killed = -1;
    auto killer = SignalRankAfter(
        [&] {
          std::error_code ec;
          return std::filesystem::exists(ck + "/" + trigger, ec);
        },
        delay_ms, rank, SIGKILL, &killed);
    TrainRun crashed =
        Train(*dir_, tag + "_killed",
              Cat(Job(model, change), {"--transport", transport, "--checkpoint-dir", ck,
                                       "--checkpoint-every", "40", "--servers", "2"}),
              120, killer);
    std::printf("%s: rank %d killed %d ms after %s appeared; newest checkpoint then: %s",
                tag.c_str(), rank, delay_ms, trigger.c_str(), Slurp(ck + "/LATEST").c_str());
    EXPECT_GT(killed, 0) << tag << ": the job ended before the kill: " << crashed.proc.Describe();
    if (killed <= 0) return "";
    EXPECT_NE(crashed.proc.exit_code, 0) << crashed.proc.Describe();
    EXPECT_FALSE(crashed.proc.timed_out) << crashed.proc.Describe();
    // The launcher names the rank that died and how.
    EXPECT_NE(crashed.proc.err.find("rank " + std::to_string(rank)), std::string::npos)
        << crashed.proc.Describe();
    EXPECT_NE(crashed.proc.err.find("signal 9"), std::string::npos) << crashed.proc.Describe();

    const std::string out = *dir_ / (tag + ".resumed");
    TrainRun resumed =
        Train(*dir_, tag + "_resumed",
              Cat(Cat(Job(model, change), {"--resume", ck, "--model-out", out}), resume_args));
    EXPECT_TRUE(resumed.ok()) << resumed.proc.Describe();
    return Slurp(out);
  }

  static TempDir* dir_;
  static std::string train_;
  static uint64_t seed_;
  static std::mt19937_64 rng_;
};
TempDir* Resume::dir_ = nullptr;
std::string Resume::train_;
uint64_t Resume::seed_ = 0;
std::mt19937_64 Resume::rng_;

TEST_F(Resume, FtrlKilledRankResumesToTheSameModelBytes) {
  const std::string ref = Reference("ftrl");
  ASSERT_FALSE(ref.empty());
  // Rank 0 is server 0 and the coordinator; rank 1 server 1; ranks 2, 3 the workers.
  EXPECT_EQ(KillAndResume("ftrl", "tcp", 0, {"--transport", "tcp", "--servers", "3"}), ref)
      << "coordinator killed, resumed on 3 servers";
  EXPECT_EQ(KillAndResume("ftrl", "ucx", 1, {"--transport", "ucx", "--servers", "2"}), ref)
      << "server 1 killed";
  EXPECT_EQ(KillAndResume("ftrl", "tcp", 3, {"--transport", "ucx", "--servers", "1"}), ref)
      << "worker 1 killed, resumed over ucx on 1 server";
}

// A checkpoint of a job without replicas restores into one with them (every server loads the
// rows of each shard it hosts: its own and its predecessor's), and into more shards than servers
// (--shards: seven shards on three servers, each with two copies), and the run ends the same.
TEST_F(Resume, ResumesIntoAReplicatedJob) {
  const std::string ref = Reference("ftrl");
  ASSERT_FALSE(ref.empty());
  EXPECT_EQ(
      KillAndResume("ftrl", "tcp", 2,
                    {"--transport", "tcp", "--servers", "3", "--replicas", "2", "--shards", "7"}),
      ref)
      << "worker 0 killed, resumed on 3 servers with 2 replicas and 7 shards";
}

// The mlp's dense layers (Adam state in one row each) and embeddings come back as well.
TEST_F(Resume, MlpKilledWorkerResumesToTheSameModelBytes) {
  const std::string ref = Reference("mlp");
  ASSERT_FALSE(ref.empty());
  EXPECT_EQ(KillAndResume("mlp", "ucx", 2, {"--transport", "ucx", "--servers", "2"}), ref)
      << "worker 0 killed";
}

// Automatic passes resume too: the record of finished passes (CHECKPOINT_DIR/EPOCHS) and the kept
// model (CHECKPOINT_DIR/kept-E) make the resumed job take the uninterrupted run's decisions and
// export its kept model, byte for byte. The kill comes after the first pass was decided.
TEST_F(Resume, AutomaticPassesResumeToTheSameKeptModel) {
  // No refit: a job with checkpoints never refits (auto_settings.h), and the reference has none.
  const std::map<std::string, std::string> change = {{"--epochs", "auto"},
                                                     {"--min-improvement", "0.003"},
                                                     {"--refit", "off"},
                                                     {"--patience", "2"}};
  const std::string ref = Reference("fm", change);
  ASSERT_FALSE(ref.empty());
  EXPECT_EQ(
      KillAndResume("fm", "tcp", 3, {"--transport", "tcp", "--servers", "2"}, change, "EPOCHS"),
      ref)
      << "worker 1 killed after the first pass";
}

TEST_F(Resume, RefusesWhatCannotResume) {
  const std::string ck = *dir_ / "errors.ck";
  TrainRun first = Train(*dir_, "errors_first",
                         Cat(Job("ftrl"), {"--checkpoint-dir", ck, "--checkpoint-every", "100",
                                           "--transport", "tcp"}));
  ASSERT_TRUE(first.ok()) << first.proc.Describe();
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {Cat(Job("ftrl"), {"--resume", *dir_ / "nothing-here"}), "no checkpoint at"},
      {Cat(Job("ftrl", {{"--workers", "3"}}), {"--resume", ck}), "same worker count"},
      {Cat(Job("ftrl", {{"--batch-size", "32"}}), {"--resume", ck}), "other data, --batch-size"},
      {Cat(Job("ftrl", {{"--epochs", "1"}}), {"--resume", ck}), "this training has"},
      {Cat(Job("lr"), {"--resume", ck}), "table 'weights'"},
      {{"--model", "ftrl", "--train", train_, "--checkpoint-dir", ck}, "needs --consistency bsp"},
      {Cat(Job("ftrl"), {"--checkpoint-every", "5"}), "needs --checkpoint-dir"},
  };
  for (const Case& c : cases) {
    TrainRun r = Train(*dir_, "errors_case", Cat(c.args, {"--transport", "tcp"}), 60);
    EXPECT_NE(r.proc.exit_code, 0) << r.proc.Describe();
    EXPECT_FALSE(r.proc.timed_out) << r.proc.Describe();
    EXPECT_NE(r.proc.err.find(c.says), std::string::npos)
        << "expected '" << c.says << "' in: " << r.proc.Describe();
  }
}

}  // namespace
}  // namespace ferry::train_test
