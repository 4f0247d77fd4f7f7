// ferry-lat / ferry-bw end to end: --local runs over tcp with tiny iteration counts, their JSON
// and CSV output parsed, the text header, and bad usage (clear message, exit code 2, no crash).
// argv[1] and argv[2] are the paths of ferry-lat and ferry-bw (passed by meson).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tools/bench/report.h"

extern char** environ;

namespace ferry::bench {
namespace {

using ::testing::HasSubstr;

std::string g_lat, g_bw;

struct ProcResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string out, err;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `binary args...` with stdout and stderr captured in files.
ProcResult Exec(const std::string& binary, const std::vector<std::string>& args) {
  char dir_template[] = "/tmp/ferry_cli_XXXXXX";
  const char* dir = mkdtemp(dir_template);
  ProcResult r;
  if (dir == nullptr) return r;
  const std::string out = std::string(dir) + "/out", err = std::string(dir) + "/err";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<std::string> all = {binary};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, binary.c_str(), &fa, nullptr, argv.data(), environ) == 0) {
    int status = 0;
    waitpid(pid, &status, 0);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  posix_spawn_file_actions_destroy(&fa);
  r.out = Slurp(out);
  r.err = Slurp(err);
  unlink(out.c_str());
  unlink(err.c_str());
  rmdir(dir);
  return r;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) out.push_back(line);
  return out;
}

std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}

bool IsNumber(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

const std::vector<std::string> kTiny = {"--transport", "tcp", "--local",   "-n", "5",
                                        "--warmup",    "1",   "--timeout", "20"};

std::vector<std::string> With(std::vector<std::string> more) {
  std::vector<std::string> args = kTiny;
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(LatTool, LocalTextOutputHasPerftestHeader) {
  ProcResult r = Exec(g_lat, kTiny);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Ferry send latency test"));
  EXPECT_THAT(r.out, HasSubstr("Transport       : tcp"));
  EXPECT_THAT(r.out, HasSubstr("#bytes #iterations    t_min[usec]    t_max[usec]"));
  EXPECT_THAT(r.out, HasSubstr("99% percentile[usec]"));
}

TEST(LatTool, LocalJsonToStdoutIsValidForEveryOp) {
  for (const char* op : {"send", "write", "read", "write_imm", "sparse_write", "sparse_read"}) {
    std::vector<std::string> args = With({"--op", op, "--json", "-"});
    if (std::string(op).rfind("sparse", 0) != 0) {
      args.insert(args.end(), {"--size", "8,4K"});
    } else {
      args.insert(args.end(), {"--rows", "4", "--row-size", "64", "--region-size", "64K"});
    }
    ProcResult r = Exec(g_lat, args);
    ASSERT_EQ(r.exit_code, 0) << op << ": " << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << op << ": stdout is not JSON:\n" << r.out;
    EXPECT_EQ(j["tool"], "ferry-lat");
    EXPECT_EQ(j["op"], op);
    ASSERT_TRUE(j["results"].is_array());
    const size_t want = std::string(op).rfind("sparse", 0) == 0 ? 1 : 2;
    // The default run makes a checked pass and a timed pass per size.
    ASSERT_EQ(j["results"].size(), want) << op;
    ASSERT_EQ(j["checked_results"].size(), want) << op;
    for (const auto& row : j["checked_results"]) EXPECT_EQ(row["check"], "full");
    for (const auto& row : j["results"]) {
      EXPECT_EQ(row["check"], "ref");
      EXPECT_EQ(row["iterations"], 5);
      for (const char* k : {"t_min_usec", "t_max_usec", "t_typical_usec", "t_avg_usec",
                            "t_stdev_usec", "p99_usec", "p99_9_usec"}) {
        EXPECT_TRUE(row[k].is_number()) << k;
      }
    }
    // The text table moved to stderr so stdout stays pure JSON.
    EXPECT_THAT(r.err, HasSubstr("#bytes"));
  }
}

TEST(BwTool, LocalSweepCsvToStdout) {
  ProcResult r = Exec(g_bw, With({"-a", "-t", "2", "--csv", "-"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 1u + 2 * 23) << r.out;  // header + (2 B .. 8 MiB) x 2 passes
  const std::vector<std::string> header = Cells(lines[0]);
  EXPECT_EQ(header, CsvColumns(Mode::kBandwidth));
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> cells = Cells(lines[i]);
    ASSERT_EQ(cells.size(), header.size()) << lines[i];
    EXPECT_EQ(cells[0], "tcp");
    EXPECT_EQ(cells[1], "send");
    for (size_t c = 2; c + 1 < cells.size(); ++c) EXPECT_TRUE(IsNumber(cells[c])) << lines[i];
    EXPECT_EQ(std::stoull(cells[2]), uint64_t{2} << ((i - 1) / 2));
    EXPECT_EQ(cells.back(), i % 2 == 1 ? "full" : "ref") << lines[i];
    EXPECT_GT(std::stod(cells[5]), 0) << "average bandwidth";
  }
}

// One pass when asked for one: --check full (every transfer verified), --check ref and its old
// name --no-verify (timed as the reference tools check); the text says which.
TEST(BwTool, CheckPicksThePasses) {
  for (const auto& [flag, want] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--check", "full"}, "full"}, {{"--check", "ref"}, "ref"}, {{"--no-verify"}, "ref"}}) {
    std::vector<std::string> args = With({"-s", "4K", "--op", "write", "--csv", "-"});
    args.insert(args.end(), flag.begin(), flag.end());
    ProcResult r = Exec(g_bw, args);
    ASSERT_EQ(r.exit_code, 0) << flag[0] << ": " << r.err;
    const std::vector<std::string> lines = Lines(r.out);
    ASSERT_EQ(lines.size(), 2u) << r.out;
    EXPECT_EQ(Cells(lines[1]).back(), want);
    EXPECT_THAT(r.err, HasSubstr("Checks          : " + want));
  }
}

// Fewer ops than the window (-n 5, depth 16): every op is posted at once and tcp completes them
// in bunches. The measured interval once began at the last warmup completion and reported
// millions of MiB/s; it now begins at the first measured post. The bound is physical, not a
// timing: 100 GiB/s is beyond this machine's memory bandwidth, so no loopback run can reach it.
TEST(BwTool, ShortRunsReportPhysicallyPossibleBandwidth) {
  ProcResult r = Exec(g_bw, With({"-s", "256K,1M,2M", "--json", "-"}));  // kTiny: -n 5
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_EQ(j["results"].size(), 3u);
  for (const auto& row : j["results"]) {
    EXPECT_GT(row["bw_avg_mb_s"].get<double>(), 0);
    EXPECT_LT(row["bw_avg_mb_s"].get<double>(), 100.0 * 1024) << row.dump();
    EXPECT_LT(row["bw_peak_mb_s"].get<double>(), 100.0 * 1024) << row.dump();
  }
}

TEST(BwTool, LocalJsonAndCsvFilesForWritesReadsAndBidir) {
  char dir_template[] = "/tmp/ferry_bw_XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string json_path = dir + "/r.json", csv_path = dir + "/r.csv";
  for (std::vector<std::string> extra :
       {std::vector<std::string>{"--op", "write", "-s", "64K,1M"},
        std::vector<std::string>{"--op", "read", "-s", "4K", "-b"},
        std::vector<std::string>{"--op", "sparse_write", "--rows", "16", "--row-size", "128",
                                 "--region-size", "1M", "-q", "2", "--threads", "2"},
        std::vector<std::string>{"--op", "pack_write", "--rows", "16", "--row-size", "128",
                                 "--region-size", "1M"},
        std::vector<std::string>{"--op", "pack_read", "--rows", "16", "--row-size", "128",
                                 "--region-size", "1M", "--thread-mode", "multi"}}) {
    extra.insert(extra.end(), {"--json", json_path, "--csv", csv_path});
    ProcResult r = Exec(g_bw, With(extra));
    ASSERT_EQ(r.exit_code, 0) << extra[1] << ": " << r.err;
    EXPECT_THAT(r.out, HasSubstr("BW peak[MB/sec]"));
    nlohmann::json j = nlohmann::json::parse(Slurp(json_path), nullptr, false);
    ASSERT_FALSE(j.is_discarded());
    EXPECT_EQ(j["tool"], "ferry-bw");
    EXPECT_EQ(j["op"], extra[1]);
    for (const auto& row : j["results"]) EXPECT_GT(row["bw_avg_mb_s"].get<double>(), 0);
    const std::vector<std::string> lines = Lines(Slurp(csv_path));
    ASSERT_EQ(lines.size(), 1 + j["results"].size() + j["checked_results"].size());
    for (const std::string& l : lines)
      EXPECT_EQ(Cells(l).size(), CsvColumns(Mode::kBandwidth).size());
  }
  unlink(json_path.c_str());
  unlink(csv_path.c_str());
  rmdir(dir.c_str());
}

TEST(Tools, BadUsageIsAClearErrorNotACrash) {
  struct Bad {
    const std::string* tool;
    std::vector<std::string> args;
    const char* message;
  };
  const std::vector<Bad> cases = {
      {&g_lat, {"--op", "bogus", "--local"}, "unknown op"},
      {&g_lat, {"--transport", "carrier-pigeon"}, "transport"},
      {&g_lat, {"--local", "--size", "0"}, "must be positive"},
      {&g_lat, {"--local", "--size", "12Q"}, "unknown unit"},
      {&g_lat, {"--local", "--bidir"}, "bidir"},
      {&g_lat, {"--local", "--param", "NOEQUALS"}, "KEY=VALUE"},
      {&g_lat, {"--local", "--op", "sparse_read", "-s", "64"}, "sparse"},
      {&g_lat, {"--local", "-a", "-s", "64"}, "either -a or --size"},
      {&g_lat, {"--local", "--threads", "4"}, "threads"},
      {&g_lat, {"127.0.0.1", "--local"}, "--local"},
      {&g_lat, {"--no-such-flag"}, "no-such-flag"},
      {&g_bw, {"--local", "-t", "0"}, "depth"},
      {&g_bw, {"--local", "--iters", "-3"}, "iters"},
      {&g_bw, {"--json", "x.json"}, "client"},
      {&g_bw, {"--local", "--json", "-", "--csv", "-"}, "stdout"},
      {&g_bw, {"--local", "--check", "sometimes"}, "--check"},
      {&g_bw, {"--local", "--thread-mode", "single", "--progress-thread"}, "progress-thread"},
      {&g_bw, {"--local", "--op", "pack_read", "-t", "100", "--rows", "4"}, "pack_read"},
      {&g_lat, {"--local", "--op", "pack_write", "--rows", "4"}, "bandwidth reference"},
  };
  for (const Bad& b : cases) {
    ProcResult r = Exec(*b.tool, b.args);
    EXPECT_EQ(r.exit_code, 2) << b.args[0] << " " << (b.args.size() > 1 ? b.args[1] : "")
                              << "\nstderr: " << r.err;
    EXPECT_THAT(r.err, HasSubstr(b.message)) << b.args[0];
  }
}

TEST(Tools, UnreachableServerIsARuntimeError) {
  // Nothing listens on port 1 of loopback.
  ProcResult r = Exec(g_lat, {"--transport", "tcp", "127.0.0.1:1", "-n", "1", "--timeout", "3"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("error"));
}

TEST(Tools, HelpExitsZero) {
  for (const std::string* tool : {&g_lat, &g_bw}) {
    ProcResult r = Exec(*tool, {"--help"});
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_THAT(r.out, HasSubstr("--transport"));
  }
}

}  // namespace
}  // namespace ferry::bench

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s FERRY_LAT FERRY_BW\n", argv[0]);
    return 2;
  }
  ferry::bench::g_lat = argv[1];
  ferry::bench::g_bw = argv[2];
  return RUN_ALL_TESTS();
}
