// Continuous training: ferry-train --train - (a pipe) or a FIFO, dealt to 2 workers by the
// local launcher; progressive evaluation windows; the ends (stream end, --max-samples,
// --idle-exit, SIGINT); malformed lines named with their source; what a stream refuses.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "tests/train/train_test_util.h"

namespace ferry::train_test {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

// "A | B" through /bin/sh, each part's words single-quoted.
std::string Quote(const std::vector<std::string>& words) {
  std::string s;
  for (const std::string& w : words) s += (s.empty() ? "'" : " '") + w + "'";
  return s;
}

std::vector<std::string> Gen(uint64_t samples, const std::vector<std::string>& more = {}) {
  return Cat(
      {GenBin(), "--stream", "--samples", std::to_string(samples), "--fields", "8", "--seed", "11"},
      more);
}

// The "window" lines of a metrics file and the "final" one.
struct Windows {
  std::vector<nlohmann::json> windows;
  nlohmann::json final_line;
  uint64_t samples = 0;  // summed over the windows
};
Windows ReadWindows(const std::string& path) {
  Windows w;
  for (const nlohmann::json& j : JsonLines(path)) {
    if (j.value("event", "") == "window") {
      w.windows.push_back(j);
      w.samples += j.value("window_samples", uint64_t{0});
    } else if (j.value("event", "") == "final") {
      w.final_line = j;
    }
  }
  return w;
}

// Writes `text` to a FIFO (again and again while *endless), then keeps it open while *keep_open.
class FifoWriter {
 public:
  FifoWriter(std::string path, std::string text, std::atomic<bool>* keep_open,
             std::atomic<bool>* endless = nullptr)
      : ignore_(::signal(SIGPIPE, SIG_IGN)),  // the job closing its end is a write error here
        thread_([=] {
          const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
          if (fd < 0) return;
          bool ok = WriteFully(fd, text);
          while (ok && endless != nullptr && endless->load()) ok = WriteFully(fd, text);
          while (ok && keep_open != nullptr && keep_open->load()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
          ::close(fd);
        }) {}
  ~FifoWriter() { thread_.join(); }

 private:
  sighandler_t ignore_;
  std::thread thread_;
};

std::string SampleText(int lines) {
  std::string s;
  for (int i = 0; i < lines; ++i) {
    s += (i % 4 == 0 ? "1" : "0") + std::string(" ") + std::to_string(1 + i % 50) + ":1 " +
         std::to_string(100 + (i % 4 == 0 ? 1 : 2)) + ":1\n";
  }
  return s;
}

class Stream : public ::testing::TestWithParam<std::string> {};

TEST_P(Stream, APipeDealtToTwoWorkersIsScoredPerWindowTrainedOnceAndExported) {
  TempDir dir;
  const std::string metrics = dir / "m.jsonl", model = dir / "m.bin", test = dir / "te.svm";
  Generate(dir / "unused.svm", test,
           {"--samples", "10", "--test-samples", "5000", "--fields", "8", "--vocab", "200",
            "--seed", "11"});
  const std::string cmd = Quote(Gen(120000, {"--vocab", "200"})) + " | " +
                          Quote({TrainBin(), "--train", "-", "--model", "ftrl", "--transport",
                                 GetParam(), "--window", "20000", "--test", test, "--model-out",
                                 model, "--metrics-json", metrics, "--progress", "never"});
  Proc p = Exec({"/bin/sh", "-c", cmd}, 120);
  ASSERT_EQ(p.exit_code, 0) << p.Describe();
  // The pipe's blocks are spliced into the workers' pipes (stream_splice.h): counted in bytes.
  EXPECT_THAT(p.err, ContainsRegex("the stream gave [0-9]+ bytes \\(end of input; stdin\\)"));
  Windows w = ReadWindows(metrics);
  // Every sample scored once before its push, whichever worker it was dealt to.
  EXPECT_EQ(w.samples, 120000u);
  ASSERT_GE(w.windows.size(), 5u);
  ASSERT_TRUE(w.final_line.is_object());
  EXPECT_EQ(w.final_line.value("samples", uint64_t{0}), 120000u);
  for (const nlohmann::json& j : w.windows) {
    for (const char* key : {"logloss", "auc", "calibration", "rmse", "mae", "samples_per_sec"}) {
      ASSERT_TRUE(j.contains(key) && j[key].is_number()) << key << " in " << j.dump();
    }
  }
  // Progressive: the first window meets an empty model, the later ones a trained one.
  const double first = w.windows.front()["auc"], later = w.windows[w.windows.size() - 2]["auc"];
  EXPECT_GT(later, first + 0.03) << "first " << first << ", later " << later;
  EXPECT_LT(w.windows[w.windows.size() - 2]["logloss"].get<double>(),
            w.windows.front()["logloss"].get<double>());
  // The export is the model the final evaluation scored.
  Proc pr = Exec({PredictBin(), model, test, "--summary", "-o", dir / "p.txt"}, 60);
  ASSERT_EQ(pr.exit_code, 0) << pr.Describe();
  EXPECT_THAT(pr.err, HasSubstr("5000 samples"));
  EXPECT_GT(w.final_line.value("auc", 0.0), 0.7);
}

INSTANTIATE_TEST_SUITE_P(Transports, Stream, ::testing::Values("tcp", "ucx"));

TEST(StreamEnds, MaxSamplesCutsExactlyAndIdleExitEndsASilentFifo) {
  TempDir dir;
  const std::string fifo = dir / "in.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::atomic<bool> keep_open{true};
  {
    // 30000 lines, then the writer stays silent with the FIFO open: only --idle-exit ends it.
    FifoWriter writer(fifo, SampleText(30000), &keep_open);
    TrainRun r = Train(dir, "idle",
                       {"--train", fifo, "--model", "lr", "--transport", "tcp", "--idle-exit", "1",
                        "--window", "10000"},
                       90);
    keep_open = false;
    ASSERT_TRUE(r.ok()) << r.proc.Describe();
    EXPECT_EQ(r.final_line.value("samples", uint64_t{0}), 30000u);
    EXPECT_EQ(ReadWindows(dir / "idle.jsonl").samples, 30000u);
  }
  std::atomic<bool> endless{true};
  {
    FifoWriter writer(fifo, SampleText(5000), nullptr, &endless);
    TrainRun r = Train(dir, "max",
                       {"--train", fifo, "--model", "lr", "--transport", "tcp", "--max-samples",
                        "12345", "--window", "5000"},
                       90);
    endless = false;
    ASSERT_TRUE(r.ok()) << r.proc.Describe();
    EXPECT_EQ(r.final_line.value("samples", uint64_t{0}), 12345u);
    EXPECT_EQ(ReadWindows(dir / "max.jsonl").samples, 12345u);
  }
}

TEST(StreamEnds, SigintEndsTheJobCleanlyWithItsModel) {
  TempDir dir;
  const std::string fifo = dir / "in.fifo", model = dir / "m.bin";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::atomic<bool> endless{true};
  FifoWriter writer(fifo, SampleText(2000), nullptr, &endless);
  bool sent = false;
  TrainRun r = Train(dir, "int",
                     {"--train", fifo, "--model", "ftrl", "--transport", "tcp", "--window-seconds",
                      "0.2", "--model-out", model},
                     90, [&](pid_t pid) {
                       // Once two windows (of 0.2 s) were reported, as a user's Ctrl-C would (to
                       // the launcher only).
                       if (!sent && ReadWindows(dir / "int.jsonl").windows.size() >= 2) {
                         ::kill(pid, SIGINT);
                         sent = true;
                       }
                     });
  endless = false;
  ASSERT_TRUE(sent) << r.proc.Describe();
  ASSERT_TRUE(r.ok()) << r.proc.Describe();
  EXPECT_THAT(r.proc.err, HasSubstr("received SIGINT; ending the job"));
  const Windows w = ReadWindows(dir / "int.jsonl");
  EXPECT_EQ(w.samples, r.final_line.value("samples", uint64_t{0}));
  EXPECT_GT(w.samples, 0u);
  struct stat st;
  ASSERT_EQ(::stat(model.c_str(), &st), 0) << "no model after SIGINT";
  EXPECT_GT(st.st_size, 0);
}

TEST(StreamEnds, AMalformedLineIsNamedWithItsSourceAndSkipped) {
  TempDir dir;
  const std::string in = dir / "in.svm";
  WriteText(in, SampleText(3000) + "this is not a sample\n" + SampleText(3000));
  const std::string cmd =
      "cat '" + in + "' | " +
      Quote({TrainBin(), "--train", "-", "--model", "lr", "--transport", "tcp", "--window", "2000",
             "--metrics-json", dir / "m.jsonl", "--progress", "never", "-q"});
  Proc p = Exec({"/bin/sh", "-c", cmd}, 90);
  ASSERT_EQ(p.exit_code, 0) << p.Describe();
  EXPECT_THAT(p.err, HasSubstr("malformed line stdin:"));
  EXPECT_THAT(p.err, HasSubstr("share of stdin"));
  const Windows w = ReadWindows(dir / "m.jsonl");
  EXPECT_EQ(w.samples, 6000u);
  EXPECT_EQ(w.final_line.value("samples", uint64_t{0}), 6000u);
}

TEST(StreamEnds, AFollowedDirectoryTrainsTheFilesThatArriveWhileTheJobRuns) {
  TempDir dir;
  const std::string in = dir / "in";
  ASSERT_EQ(::mkdir(in.c_str(), 0700), 0);
  WriteText(in + "/hour-00", SampleText(4000));
  std::thread producer([&] {
    // Hourly partitions, each written aside and renamed into place.
    for (int h = 1; h <= 2; ++h) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const std::string tmp = in + "/.hour-0" + std::to_string(h);
      WriteText(tmp, SampleText(3000));
      ::rename(tmp.c_str(), (in + "/hour-0" + std::to_string(h)).c_str());
    }
  });
  TrainRun r = Train(dir, "follow",
                     {"--follow", in, "--model", "lr", "--transport", "tcp", "--idle-exit", "1",
                      "--window", "2000"},
                     90);
  producer.join();
  ASSERT_TRUE(r.ok()) << r.proc.Describe();
  EXPECT_EQ(r.final_line.value("samples", uint64_t{0}), 10000u);
  EXPECT_EQ(ReadWindows(dir / "follow.jsonl").samples, 10000u);
  Proc both = Exec({TrainBin(), "--follow", in, "--train", dir / "x.svm"}, 30);
  EXPECT_EQ(both.exit_code, 2) << both.Describe();
  EXPECT_THAT(both.err, HasSubstr("replaces --train"));
}

TEST(StreamEnds, AnEmptyStreamFailsTheJob) {
  TempDir dir;
  Proc p = Exec({"/bin/sh", "-c",
                 "printf 'not a sample\\n' | " + Quote({TrainBin(), "--train", "-", "--transport",
                                                        "tcp", "--progress", "never"})},
                60);
  EXPECT_EQ(p.exit_code, 1) << p.Describe();
  EXPECT_THAT(p.err, HasSubstr("gave no training sample")) << p.Describe();
}

TEST(StreamEnds, WhatAStreamCannotDoIsRefusedNamingTheFlag) {
  TempDir dir;
  const std::string file = dir / "a.svm";
  WriteText(file, SampleText(10));
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--epochs", "3"}, "--epochs 1"},
      {{"--consistency", "bsp"}, "--consistency bsp"},
      {{"--validation-fraction", "0.1"}, "held-out"},
  };
  for (const auto& [flags, message] : cases) {
    Proc p = Exec(Cat({TrainBin(), "--train", "-", "--transport", "tcp"}, flags), 30);
    EXPECT_EQ(p.exit_code, 1) << p.Describe();
    EXPECT_THAT(p.err, HasSubstr(message)) << p.Describe();
  }
  Proc two = Exec({TrainBin(), "--train", file, "-", "--transport", "tcp"}, 30);
  EXPECT_EQ(two.exit_code, 1) << two.Describe();
  EXPECT_THAT(two.err, HasSubstr("must be the only training input"));
}

// The picture of a week-long job in seconds: 2M samples of a stream whose vocabulary and
// truth drift (half of each field's ids and of the truth replaced after 1M samples) through a
// pipe into 2 servers + 2 workers, with eviction of rows unseen for 0.3 s and without. Without,
// the rows only grow (old ids stay); with, they return to the live vocabulary once the old ids
// go, while the ids admitted keep growing. The window after the drift scores worse (a model of
// the old truth meets the new one) and later windows recover.
TEST(StreamDrift, EvictionKeepsRowsBoundedWhileTheVocabularyGrowsAndAucRecovers) {
  TempDir dir;
  const auto run = [&](const std::string& tag, const std::vector<std::string>& eviction) {
    const std::string metrics = dir / (tag + ".jsonl");
    const std::string cmd =
        Quote(Gen(2000000, {"--vocab", "2000", "--drift", "0.5", "--drift-every", "1000000"})) +
        " | " +
        Quote(Cat({TrainBin(), "--train", "-", "--model", "ftrl", "--transport", "tcp", "--window",
                   "100000", "--metrics-json", metrics, "--progress", "never", "-q"},
                  eviction));
    Proc p = Exec({"/bin/sh", "-c", cmd}, 120);
    EXPECT_EQ(p.exit_code, 0) << p.Describe();
    return ReadWindows(metrics);
  };
  const Windows kept = run("kept", {});
  const Windows evicted = run("evicted", {"--evict-unseen", "0.3", "--evict-tick", "0.1"});
  ASSERT_GE(kept.windows.size(), 20u);
  ASSERT_GE(evicted.windows.size(), 20u);
  const auto rows = [](const Windows& w, size_t i) { return w.windows[i].value("rows", 0.0); };
  const size_t before = 8, last = kept.windows.size() - 1;  // window 9 ends before the drift
  // 8 fields x 2000 live ids (+ the bias); 1.5 times that once the drift brought half anew.
  EXPECT_GT(rows(kept, last), 1.4 * rows(kept, before));
  EXPECT_LT(rows(evicted, evicted.windows.size() - 1), 0.8 * rows(kept, last));
  double admitted = 0, evicted_rows = 0;
  for (const nlohmann::json& j : evicted.windows) {
    admitted += j.value("table.weights.admitted", 0.0);
    evicted_rows += j.value("table.weights.evicted", 0.0);
  }
  EXPECT_GE(admitted, 1.4 * rows(kept, before)) << "the vocabulary seen grows";
  EXPECT_GT(evicted_rows, 0.3 * rows(kept, before));
  // Progressive AUC: worse right after the drift, recovered by the end.
  for (const Windows* w : {&kept, &evicted}) {
    const double pre = w->windows[before]["auc"], post = w->windows[before + 2]["auc"];
    const double end = w->windows[w->windows.size() - 2]["auc"];
    EXPECT_LT(post, pre - 0.01) << "pre " << pre << " post " << post;
    EXPECT_GT(end, post + 0.01) << "post " << post << " end " << end;
  }
}

}  // namespace
}  // namespace ferry::train_test
