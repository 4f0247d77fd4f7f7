// Workers joining and leaving a job that trains on a stream (ferry-train --train - --elastic
// --worker-join-slots 1; tools/train/stream_ranks.h): rank 0 deals the launcher's standard input,
// a FIFO this test writes in three chunks of 40000 lines. After the first chunk began to train, a
// second ferry-train starts the worker join slot (--join-worker 0); once it joined, worker 1 gets
// SIGTERM and the second chunk is written (worker 1, waiting for input, acts on it after its next
// batch); once worker 1 said it leaves, the third. The joining worker must be dealt lines; the
// leaving one must be dealt none after its word (the dealer closed its share early: "1 left"; it
// trains what its connection held and goes); and every line must be trained on exactly once: the
// final line's samples (the leaver's counted through its farewell) and the windows' (each sample
// scored once before its push) are all 120000, as many as the dealer gave.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/train/train_test_util.h"

namespace ferry::train_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kChunks = 3, kChunkLines = 40000;

// Opens the FIFO for writing once a reader has it open (within 30 s); -1 otherwise.
int OpenFifoWriter(const std::string& fifo) {
  for (int i = 0; i < 3000; ++i) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      (void)::fcntl(fd, F_SETFL, 0);  // blocking writes from here
      return fd;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

bool WaitForStage(const std::atomic<int>& stage, int at_least) {
  for (int i = 0; i < 6000 && stage.load() < at_least; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return stage.load() >= at_least;
}

class ElasticStream : public ::testing::TestWithParam<std::string> {};

TEST_P(ElasticStream, AWorkerJoinsAndAnotherLeavesEveryLineTrainedOnce) {
  const std::string transport = GetParam();
  TempDir dir;
  const std::string data = dir / "stream.svm", test = dir / "test.svm", fifo = dir / "in";
  const std::string metrics = dir / "m.jsonl", joiner_err = dir / "joiner.err";
  const std::string main_err = dir / "main.err";
  Generate(data, test,
           {"--samples", std::to_string(kChunks * kChunkLines), "--test-samples", "2000",
            "--fields", "8", "--vocab", "200", "--seed", "11"});
  const std::vector<std::string> lines = Lines(Slurp(data));
  ASSERT_EQ(lines.size(), static_cast<size_t>(kChunks * kChunkLines));
  std::vector<std::string> chunks(kChunks);
  for (size_t i = 0; i < lines.size(); ++i) chunks[i / kChunkLines] += lines[i] + "\n";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::vector<std::string> args = {
      "--train",     "-",          "--model",   "ftrl",
      "--transport", transport,    "--test",    test,
      "--window",    "10000",      "--servers", "2",
      "--workers",   "2",          "--elastic", "--worker-join-slots",
      "1",           "--progress", "never",     "--metrics-json",
      metrics};
  const std::string coordinator = "127.0.0.1:" + std::to_string(FreePort());
  ASSERT_EQ(setenv("FERRY_COORDINATOR", coordinator.c_str(), 1), 0);
  // Worker 1 10 times slower (the test hook of backup_workers_test.cc): worker 0 waits for its
  // scores in most windows' rounds, so the joiner mostly joins between a round's two gathers
  // (trainer_stream.cc: "as the others closed window N").
  ASSERT_EQ(setenv("FERRY_TEST_SLOW_WORKER", "1:10", 1), 0);
  const sighandler_t pipe_was = ::signal(SIGPIPE, SIG_IGN);  // a job that died: EPIPE here
  // 0: chunk 1 written; 1: the joiner started; 2: it joined; 3: worker 1 signalled; 4: chunk 2
  // written; 5: worker 1 said it leaves (then chunk 3 is written).
  std::atomic<int> stage{-1};
  bool written = false;
  std::thread writer([&] {
    const int fd = OpenFifoWriter(fifo);
    if (fd < 0) return;
    bool ok = WriteFully(fd, chunks[0]);
    stage = 0;
    ok = ok && WaitForStage(stage, 3) && WriteFully(fd, chunks[1]);
    if (ok) stage = 4;
    ok = ok && WaitForStage(stage, 5) && WriteFully(fd, chunks[2]);
    written = ok;
    ::close(fd);
  });
  std::thread joiner;
  Proc joined;
  Proc run = Exec(
      Cat({"/bin/sh", "-c", "exec \"$0\" \"$@\" < " + fifo + " 2>" + main_err, TrainBin()}, args),
      120, [&](pid_t launcher) {
        if (stage == 0 && Slurp(metrics).find("\"window\"") != std::string::npos) {
          stage = 1;
          std::vector<std::string> argv =
              Cat({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>" + joiner_err, TrainBin()},
                  Cat(args, {"--join-worker", "0"}));
          joiner = std::thread([&joined, argv] { joined = Exec(argv, 100); });
        } else if (stage == 1 &&
                   Slurp(joiner_err).find("joined the running job") != std::string::npos) {
          stage = 2;
        } else if (stage == 2) {
          const pid_t pid = RankPid(launcher, 3);  // worker 1
          EXPECT_GT(pid, 0);
          if (pid > 0) {
            EXPECT_EQ(kill(pid, SIGTERM), 0);
          }
          stage = 3;
        } else if (stage == 4 &&
                   Slurp(main_err).find("worker 1 leaves the job") != std::string::npos) {
          stage = 5;
        }
      });
  stage = 5;  // the writer stops waiting (when the job ended first)
  writer.join();
  if (joiner.joinable()) joiner.join();
  unsetenv("FERRY_COORDINATOR");
  unsetenv("FERRY_TEST_SLOW_WORKER");
  const std::string how = Slurp(joiner_err);
  const size_t at = how.find("joined the running job");
  if (at != std::string::npos) {
    std::printf("%s: worker 2 %s\n", transport.c_str(),
                how.substr(at, how.find('\n', at) - at).c_str());
  }
  ::signal(SIGPIPE, pipe_was);
  run.err = Slurp(main_err);
  for (const char* what : {"ferry coordinator: worker", "ferry-train: worker", "the stream gave"}) {
    for (size_t at = run.err.find(what); at != std::string::npos; at = run.err.find(what, at + 1)) {
      std::printf("%s: %s\n", transport.c_str(),
                  run.err.substr(at, run.err.find('\n', at) - at).c_str());
    }
  }
  EXPECT_EQ(joined.exit_code, 0) << "the joiner: " << joined.Describe() << "\n"
                                 << Slurp(joiner_err);
  ASSERT_EQ(run.exit_code, 0) << run.Describe();
  ASSERT_TRUE(written) << "the job stopped reading its stream: " << run.Describe();
  EXPECT_THAT(run.out, HasSubstr("on 2 servers + 2 workers over " + transport +
                                 " (1 worker joined and 1 left while training): 120000 samples"));
  EXPECT_THAT(run.err, HasSubstr("the stream gave 120000 lines (end of input; stdin)"));
  // The dealer's count per worker: 0, 1 (the leaver), then the joiner.
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(run.err, m, std::regex("lines per worker: ([0-9]+), ([0-9]+), ([0-9]+)")))
      << run.err;
  const uint64_t w0 = std::stoull(m[1]), w1 = std::stoull(m[2]), w2 = std::stoull(m[3]);
  EXPECT_EQ(w0 + w1 + w2, 120000u);
  EXPECT_GT(w2, 0u) << "the joining worker was dealt nothing";
  // Its word reached the dealer while the stream ran: its share was closed early, before the
  // third chunk, which workers 0 and 2 shared.
  EXPECT_THAT(run.err, HasSubstr("(1 joined, 1 left)"));
  EXPECT_LT(w1, w0);
  EXPECT_THAT(run.err, HasSubstr("ferry-train: worker 1 left the job after " + std::to_string(w1) +
                                 " samples"));
  uint64_t windows = 0;
  nlohmann::json final_line;
  for (const nlohmann::json& j : JsonLines(metrics)) {
    if (j.value("event", "") == "window") windows += j.value("window_samples", uint64_t{0});
    if (j.value("event", "") == "final") final_line = j;
  }
  EXPECT_EQ(windows, 120000u) << "each sample scored once before its push";
  ASSERT_TRUE(final_line.is_object());
  EXPECT_EQ(final_line.value("samples", uint64_t{0}), 120000u);
  EXPECT_GT(final_line.value("auc", 0.0), 0.7) << final_line;
}

INSTANTIATE_TEST_SUITE_P(Transports, ElasticStream, ::testing::Values("tcp", "ucx"));

// The first Ctrl-C to ferry-train's launcher goes to rank 0, which deals the stream (with worker
// join slots): it ends the stream, and the job ends cleanly with what was read (every sample
// scored in a window and counted, the model written); the launcher says so.
TEST(ElasticStreamEnds, SigintGoesToRankZeroWhichEndsTheStream) {
  TempDir dir;
  const std::string fifo = dir / "in.fifo", model = dir / "m.bin";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const sighandler_t pipe_was = ::signal(SIGPIPE, SIG_IGN);  // the job closing its end
  std::atomic<bool> endless{true};
  std::string text;
  for (int i = 0; i < 2000; ++i)
    text += (i % 4 == 0 ? "1 " : "0 ") + std::to_string(1 + i % 50) + ":1\n";
  std::thread writer([&] {
    const int fd = OpenFifoWriter(fifo);
    if (fd < 0) return;
    while (endless && WriteFully(fd, text)) {
    }
    ::close(fd);
  });
  bool sent = false;
  TrainRun r =
      Train(dir, "int",
            {"--train", fifo, "--model", "ftrl", "--transport", "tcp", "--window", "5000",
             "--elastic", "--worker-join-slots", "1", "--model-out", model},
            90, [&](pid_t pid) {
              if (!sent && Slurp(dir / "int.jsonl").find("\"window\":2") != std::string::npos) {
                ::kill(pid, SIGINT);
                sent = true;
              }
            });
  endless = false;
  writer.join();
  ::signal(SIGPIPE, pipe_was);
  ASSERT_TRUE(sent) << r.proc.Describe();
  ASSERT_TRUE(r.ok()) << r.proc.Describe();
  EXPECT_THAT(r.proc.err,
              HasSubstr("received SIGINT; forwarding it to rank 0, which ends the job"));
  // No line cut in two by the stop reached a worker (the dealer drops the start it read).
  EXPECT_THAT(r.proc.err, Not(HasSubstr("malformed line")));
  uint64_t windows = 0;
  for (const nlohmann::json& j : JsonLines(dir / "int.jsonl")) {
    if (j.value("event", "") == "window") windows += j.value("window_samples", uint64_t{0});
  }
  EXPECT_GT(windows, 0u);
  EXPECT_EQ(windows, r.final_line.value("samples", uint64_t{0}));
  EXPECT_TRUE(std::filesystem::exists(model)) << "no model after SIGINT";
}

}  // namespace
}  // namespace ferry::train_test
