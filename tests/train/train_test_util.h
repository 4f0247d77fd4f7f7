// Helpers for the training integration suite (tests/train): run ferry-gen, ferry-train and
// ferry-predict as subprocesses with a deadline, read their metrics and models back.
//
// The tools' paths come from the environment meson sets (tests/train/meson.build):
//   FERRY_TRAIN, FERRY_PREDICT, FERRY_GEN     the binaries under test
//   FERRY_RUN_MPIRUN, FERRY_RUN_SRUN          tests/launch/run-mpirun.sh, run-srun.sh
// FERRY_TRAIN_TEST_KEEP=1 keeps the temporary folders (their paths are printed).
//
// Every subprocess runs in its own process group and is killed (SIGTERM, then SIGKILL) when its
// deadline passes, so a hung ferry-train fails its test instead of hanging the suite.
// Thread-safety: none (gtest runs the cases of one binary sequentially).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ferry::train_test {

struct Proc {
  int exit_code = -1;      // -1: killed by a signal (or the deadline)
  bool timed_out = false;  // the deadline passed and the group was killed
  double seconds = 0;
  std::string out, err;
  std::string Describe() const;  // exit status, time and both streams, for failure messages
};

// Runs argv[0] (a path, or a name looked up in PATH) with argv[1..] and stdin from /dev/null.
// `while_running`, when given, is called with the process's pid about every 10 ms until it
// exits (to signal it, or the processes it started, at chosen moments).
Proc Exec(const std::vector<std::string>& argv, double timeout_s,
          const std::function<void(pid_t)>& while_running = nullptr);

// The pid of the child of `parent` whose environment holds FERRY_RANK=`rank` (a rank that
// ferry-train's local cluster started), or -1.
pid_t RankPid(pid_t parent, int rank);
// A `while_running` callback for Exec/Train: once `started()` first holds (training began, a
// checkpoint appeared), and `delay_ms` later, sends `sig` to the launcher's rank `rank` once;
// *signalled gets that rank's pid (it stays -1 until then, e.g. when the job ended first).
std::function<void(pid_t)> SignalRankAfter(std::function<bool()> started, int delay_ms, int rank,
                                           int sig, pid_t* signalled);
// A process whose environment holds `env_entry` ("OMPI_COMM_WORLD_RANK=1"), with an argument
// containing `arg` (when not empty), a child of `parent` (when > 0); -1 if none.
pid_t FindProcess(const std::string& env_entry, const std::string& arg, pid_t parent = -1);

// The paths from the environment ("" when unset).
// A port that was free a moment ago on 127.0.0.1 (a job's coordinator listens there).
int FreePort();

std::string TrainBin();
std::string PredictBin();
std::string GenBin();
std::string EnvOr(const char* name, const std::string& fallback);

// A fresh folder under $TMPDIR (default /tmp), removed with its contents at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// ferry-gen's own yardstick: the truth model's logloss and AUC on the test file.
struct Bayes {
  double logloss = 0, auc = 0;
};

// Runs ferry-gen --out TRAIN --test-out TEST ARGS...; fails the calling test (ADD_FAILURE) and
// returns {0,0} when ferry-gen fails or prints no "bayes" line.
Bayes Generate(const std::string& train, const std::string& test,
               const std::vector<std::string>& args);

// A suite's data (SetUpTestSuite): a fresh folder holding ferry-gen's train.svm and test.svm,
// made with `args` (Generate).
struct GeneratedData {
  TempDir dir;
  std::string train = dir / "train.svm";
  std::string test = dir / "test.svm";
  Bayes bayes;
};
std::unique_ptr<GeneratedData> GenerateData(const std::vector<std::string>& args);

// The last line of ferry-train's --metrics-json file and the process.
struct TrainRun {
  Proc proc;
  nlohmann::json final_line;  // null when the file is missing or its last line is not JSON
  bool ok() const { return proc.exit_code == 0 && final_line.is_object(); }
  double logloss() const { return final_line.value("logloss", -1.0); }
  double auc() const { return final_line.value("auc", -1.0); }
};

// ferry-train ARGS... --metrics-json <dir>/<tag>.jsonl --progress never -q, deadline timeout_s.
TrainRun Train(const TempDir& dir, const std::string& tag, const std::vector<std::string>& args,
               double timeout_s = 120, const std::function<void(pid_t)>& while_running = nullptr);

std::string Slurp(const std::string& path);
// Writes `text` to `path` (created or truncated); a failure fails the calling test.
void WriteText(const std::string& path, const std::string& text);
// Writes all of `s` to `fd` (a pipe, a FIFO); false once a write fails (EPIPE: the reader went).
bool WriteFully(int fd, const std::string& s);
std::vector<std::string> Lines(const std::string& text);
std::vector<nlohmann::json> JsonLines(const std::string& path);  // throws on a non-JSON line
std::vector<std::string> Cat(std::vector<std::string> a, const std::vector<std::string>& b);

// The seed of a test's random moments: $VAR when set (to replay a run), else a fresh one; printed
// as "VAR=N" either way.
uint64_t SeedFromEnv(const char* var);

// Whether `name` is an executable in one of $PATH's directories.
bool OnPath(const std::string& name);

// LIBLINEAR's L2-regularised logistic regression (liblinear-train -s 0 -B 1, a bias feature as
// ferry-train has) on a LIBSVM file, scored on another with liblinear-predict -b 1.
struct LiblinearRun {
  double c = 0;  // the C it ran with
  double logloss = 0, auc = 0;
  double seconds = 0;  // liblinear-train's
  std::string error;   // empty when it ran
};
// At C = c, or (c <= 0) at the best C of liblinear-train -C (its own cross-validation).
LiblinearRun RunLiblinear(const TempDir& dir, const std::string& train, const std::string& test,
                          double c);

// Checks the final line's "samples": every pass ("epoch" of them) read the `lines` training
// lines minus the held-out ones ("validation_samples"), and a refit ("refit": true) read all of
// them "kept_epoch" times. Returns the lines trained per pass.
uint64_t ExpectTrainedPasses(const nlohmann::json& final_line, uint64_t lines);

// Pearson correlation of two equally long series (NaN when either is constant).
double Correlation(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace ferry::train_test
