// Helpers of the ferry-serve tests, over the training suite's (tests/train/train_test_util.h:
// subprocesses with deadlines in their own process groups, temporary folders, the FERRY_*
// binaries): small export directories, instances from data lines, and a subprocess that runs in
// the background until the test kills it (a training job, the ferry-serve command).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "models/data/parse.h"
#include "tests/train/train_test_util.h"

namespace ferry::serve_test {

using train_test::Lines;
using train_test::Proc;
using train_test::Slurp;
using train_test::TempDir;

// A line without its label: what a client sends as an instance.
std::string FeaturePart(const std::string& line, models::Format format);

// DIR/train.<format> and DIR/test.<format>, written by ferry-gen (small, fixed seed).
struct Data {
  std::string train, test, format;
};
Data Generate(const std::string& dir, models::Format format);

// Trains `model` on data.train, exporting into `ex` (ferry-train --export-dir, 2 servers + 2
// workers over tcp); more flags after (default: 1 pass). Fails the test when the job fails.
void TrainExport(const Data& data, const std::string& model, const std::string& ex,
                 const std::vector<std::string>& more = {"--epochs", "1"});

// argv run by train_test::Exec on a thread of its own, with a deadline of timeout_s; Signal()
// sends a signal to its whole process group, Wait() joins and returns how it ended.
class Background {
 public:
  Background(std::vector<std::string> argv, double timeout_s);
  ~Background();                             // SIGKILL to the group if still running, then Wait
  pid_t pid() const { return pid_.load(); }  // 0 until started
  void Signal(int sig);
  Proc Wait();

 private:
  std::atomic<pid_t> pid_{0};
  std::atomic<int> pending_{0};  // a signal for the group, sent from Exec's poll
  Proc result_;
  std::thread thread_;
};

}  // namespace ferry::serve_test
