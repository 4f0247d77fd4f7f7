// Subprocesses with deadlines, temporary folders and metrics parsing (train_test_util.h).
#include "tests/train/train_test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include "models/eval/metrics.h"

extern char** environ;

namespace ferry::train_test {

namespace {

using Clock = std::chrono::steady_clock;

// Reaps `pid` if it has exited; true when it has.
bool Reap(pid_t pid, int* status) {
  return waitpid(pid, status, WNOHANG) == pid;
}

}  // namespace

std::string Proc::Describe() const {
  std::ostringstream s;
  s << (timed_out ? "timed out, " : "") << "exit code " << exit_code << " after " << seconds
    << " s\n--- stdout ---\n"
    << out << "--- stderr ---\n"
    << err;
  return s.str();
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << "write " << path;
}

bool WriteFully(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

Proc Exec(const std::vector<std::string>& argv, double timeout_s,
          const std::function<void(pid_t)>& while_running) {
  Proc r;
  TempDir io;
  const std::string out = io / "out", err = io / "err";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  // Its own process group: the deadline kills the tool and every process it started.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (std::string& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const auto start = Clock::now();
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0].c_str(), &fa, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    r.err = "cannot start " + args[0] + ": " + std::strerror(rc);
    return r;
  }
  int status = 0;
  const auto deadline = start + std::chrono::duration<double>(timeout_s);
  bool done = false;
  while (!(done = Reap(pid, &status)) && Clock::now() < deadline) {
    if (while_running) while_running(pid);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!done) {
    r.timed_out = true;
    kill(-pid, SIGTERM);
    const auto grace = Clock::now() + std::chrono::seconds(3);
    while (!(done = Reap(pid, &status)) && Clock::now() < grace) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!done) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
  }
  // Whatever the tool left behind in its group (a rank that outlived it) goes too.
  kill(-pid, SIGKILL);
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.exit_code = !r.timed_out && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

std::string TrainBin() {
  return EnvOr("FERRY_TRAIN", "");
}
std::string PredictBin() {
  return EnvOr("FERRY_PREDICT", "");
}
std::string GenBin() {
  return EnvOr("FERRY_GEN", "");
}

TempDir::TempDir() {
  std::string tmpl = EnvOr("TMPDIR", "/tmp") + "/ferry_train_test_XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << tmpl << ": " << std::strerror(errno);
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  if (EnvOr("FERRY_TRAIN_TEST_KEEP", "") == "1") {
    std::fprintf(stderr, "kept %s\n", path_.c_str());
    return;
  }
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Bayes Generate(const std::string& train, const std::string& test,
               const std::vector<std::string>& args) {
  std::vector<std::string> argv = {GenBin(), "--out", train, "--test-out", test};
  argv.insert(argv.end(), args.begin(), args.end());
  Proc p = Exec(argv, 120);
  Bayes b;
  if (p.exit_code != 0) {
    ADD_FAILURE() << "ferry-gen failed: " << p.Describe();
    return b;
  }
  // "bayes (truth model on the test set): logloss 0.43070  auc 0.81903"
  // (No std::regex: gcc 12's <regex> trips -Wmaybe-uninitialized at -O1 under ASan.)
  const size_t at = p.out.find("bayes");
  const size_t ll = at == std::string::npos ? at : p.out.find("logloss ", at);
  if (ll == std::string::npos ||
      std::sscanf(p.out.c_str() + ll, "logloss %lf auc %lf", &b.logloss, &b.auc) != 2) {
    ADD_FAILURE() << "ferry-gen printed no bayes line: " << p.Describe();
    return b;
  }
  return b;
}

std::unique_ptr<GeneratedData> GenerateData(const std::vector<std::string>& args) {
  auto d = std::make_unique<GeneratedData>();
  d->bayes = Generate(d->train, d->test, args);
  return d;
}

namespace {

// Whether the NUL-separated list `list` holds an entry equal to `want`, or containing it with
// `substring`.
bool HasEntry(const std::string& list, const std::string& want, bool substring) {
  size_t at = 0;
  while (at < list.size()) {
    const size_t end = list.find('\0', at);
    const std::string entry = list.substr(at, (end == std::string::npos ? list.size() : end) - at);
    if (substring ? entry.find(want) != std::string::npos : entry == want) return true;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return false;
}

}  // namespace

pid_t FindProcess(const std::string& env_entry, const std::string& arg, pid_t parent) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (parent > 0) {
      // /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces, so from the last ')'.
      const std::string stat = Slurp(e.path().string() + "/stat");
      const size_t close = stat.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(stat.substr(close + 1));
      std::string state;
      long ppid = -1;
      rest >> state >> ppid;
      if (ppid != parent) continue;
    }
    if (!arg.empty() && !HasEntry(Slurp(e.path().string() + "/cmdline"), arg, true)) continue;
    if (HasEntry(Slurp(e.path().string() + "/environ"), env_entry, false)) {
      return static_cast<pid_t>(std::stol(name));
    }
  }
  return -1;
}

pid_t RankPid(pid_t parent, int rank) {
  return FindProcess("FERRY_RANK=" + std::to_string(rank), "", parent);
}

std::function<void(pid_t)> SignalRankAfter(std::function<bool()> started, int delay_ms, int rank,
                                           int sig, pid_t* signalled) {
  *signalled = -1;
  auto since = std::make_shared<std::chrono::steady_clock::time_point>();
  return [started = std::move(started), since, delay_ms, rank, sig, signalled](pid_t launcher) {
    if (*signalled > 0) return;
    if (*since == std::chrono::steady_clock::time_point{}) {
      if (started()) *since = std::chrono::steady_clock::now();
      return;
    }
    if (std::chrono::steady_clock::now() - *since < std::chrono::milliseconds(delay_ms)) return;
    const pid_t pid = RankPid(launcher, rank);
    if (pid > 0 && kill(pid, sig) == 0) *signalled = pid;
  };
}

uint64_t SeedFromEnv(const char* var) {
  const char* s = std::getenv(var);
  const uint64_t seed = s != nullptr ? std::strtoull(s, nullptr, 10) : std::random_device()();
  std::printf("%s=%llu\n", var, static_cast<unsigned long long>(seed));
  return seed;
}

TrainRun Train(const TempDir& dir, const std::string& tag, const std::vector<std::string>& args,
               double timeout_s, const std::function<void(pid_t)>& while_running) {
  const std::string metrics = dir / (tag + ".jsonl");
  std::vector<std::string> argv = {TrainBin()};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--metrics-json", metrics, "--progress", "never", "-q"});
  TrainRun r;
  r.proc = Exec(argv, timeout_s, while_running);
  const std::vector<std::string> lines = Lines(Slurp(metrics));
  if (!lines.empty()) {
    r.final_line = nlohmann::json::parse(lines.back(), nullptr, /*allow_exceptions=*/false);
    if (r.final_line.is_discarded()) r.final_line = nullptr;
  }
  return r;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) out.push_back(line);
  return out;
}

std::vector<nlohmann::json> JsonLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  for (const std::string& line : Lines(Slurp(path))) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::vector<std::string> Cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

bool OnPath(const std::string& name) {
  std::stringstream path(EnvOr("PATH", "/usr/bin:/bin"));
  std::string dir;
  while (std::getline(path, dir, ':')) {
    if (!dir.empty() && access((dir + "/" + name).c_str(), X_OK) == 0) return true;
  }
  return false;
}

namespace {

// P(label 1) of each line of liblinear-predict -b 1 output ("labels 0 1" then "<pred> <p0>
// <p1>"), or empty when the header names no label 1.
std::vector<float> LiblinearProbabilities(const std::string& predictions) {
  const std::vector<std::string> p = Lines(Slurp(predictions));
  if (p.empty()) return {};
  std::stringstream header(p[0]);
  std::string word;
  header >> word;  // "labels"
  int column_of_1 = -1;
  for (int c = 0; header >> word; ++c) {
    if (word == "1") column_of_1 = c;
  }
  if (column_of_1 < 0) return {};
  std::vector<float> out;
  for (size_t i = 1; i < p.size(); ++i) {
    std::stringstream row(p[i]);
    double pred = 0, prob = 0;
    row >> pred;
    for (int c = 0; c <= column_of_1; ++c) row >> prob;
    out.push_back(static_cast<float>(prob));
  }
  return out;
}

}  // namespace

LiblinearRun RunLiblinear(const TempDir& dir, const std::string& train, const std::string& test,
                          double c) {
  LiblinearRun r;
  if (!OnPath("liblinear-train") || !OnPath("liblinear-predict")) {
    r.error =
        "liblinear-train / liblinear-predict not on PATH (scripts/deps.sh installs "
        "liblinear-tools)";
    return r;
  }
  if (c <= 0) {
    Proc search = Exec({"liblinear-train", "-s", "0", "-B", "1", "-C", train}, 600);
    const size_t at = search.out.rfind("Best C = ");
    if (search.exit_code != 0 || at == std::string::npos) {
      r.error = "liblinear-train -C: " + search.Describe();
      return r;
    }
    c = std::atof(search.out.c_str() + at + 9);
  }
  r.c = c;
  const std::string model = dir / "liblinear.model", out = dir / "liblinear.out";
  char cs[32];
  std::snprintf(cs, sizeof cs, "%g", c);
  Proc fit = Exec({"liblinear-train", "-s", "0", "-B", "1", "-c", cs, "-q", train, model}, 600);
  r.seconds = fit.seconds;
  if (fit.exit_code != 0) {
    r.error = "liblinear-train: " + fit.Describe();
    return r;
  }
  Proc pred = Exec({"liblinear-predict", "-b", "1", test, model, out}, 120);
  const std::vector<float> probs = LiblinearProbabilities(out);
  const std::vector<std::string> data = Lines(Slurp(test));
  if (pred.exit_code != 0 || probs.size() != data.size() || data.empty()) {
    r.error = "liblinear-predict: " + pred.Describe();
    return r;
  }
  double sum = 0;
  models::AucAccumulator auc;
  for (size_t i = 0; i < data.size(); ++i) {
    const bool positive = std::atof(data[i].c_str()) > 0;
    const double q = std::clamp(positive ? probs[i] : 1.0 - probs[i], 1e-15, 1.0);
    sum -= std::log(q);
    auc.Add(probs[i], positive ? 1.0f : 0.0f);
  }
  r.logloss = sum / static_cast<double>(data.size());
  r.auc = auc.Compute().auc;
  return r;
}

uint64_t ExpectTrainedPasses(const nlohmann::json& final_line, uint64_t lines) {
  const uint64_t held_out = final_line.value("validation_samples", uint64_t{0});
  const uint64_t epochs = final_line.value("epoch", uint64_t{0});
  EXPECT_GE(epochs, 1u) << final_line.dump();
  EXPECT_LT(held_out, lines / 4) << final_line.dump();  // a tenth, or a fifth with a refit
  // A refit trains a fresh model on every line for the kept pass count after the passes.
  const uint64_t refit =
      final_line.value("refit", false) ? final_line.value("kept_epoch", uint64_t{0}) * lines : 0;
  EXPECT_EQ(final_line.value("samples", uint64_t{0}), epochs * (lines - held_out) + refit)
      << final_line.dump();
  return lines - held_out;
}

double Correlation(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = std::min(x.size(), y.size());
  if (n < 2) return std::nan("");
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) mx += x[i], my += y[i];
  mx /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : std::nan("");
}

}  // namespace ferry::train_test
