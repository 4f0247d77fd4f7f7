// Smoke test of ferry-ps-bench's kernels (tools/ps) and of the programs built on them:
//   - keys.h and the result codec on their own;
//   - the kernels through real in-process jobs (every rank a thread, tests/ps/cluster.h) over each
//     local backend configuration present here, tiny sizes, with the checked pass on; the JSON
//     report is parsed back strictly;
//   - ferry-ps-bench end to end under ferry-launch exactly as documented (`ferry-launch --servers 2
//     --workers 2 -- ferry-ps-bench --json`: its stdout must be one strictly valid JSON object)
//     and under the stand-in tests/launch/run-ferry-env.sh, and ps_reference; --json parsed
//     strictly.
// Usage (meson passes the paths): psbench_smoke RUN_FERRY_ENV FERRY_PS_BENCH PS_REFERENCE
//                                               [FERRY_LAUNCH]
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "tests/ps/cluster.h"
#include "tools/ps/ps_bench.h"

namespace ferry::psbench {
namespace {

std::string g_launcher, g_bench, g_reference, g_ferry_launch;

TEST(PsBenchKeys, UniqueBatchesAreDistinctAndCoverTheSpace) {
  KeySpec spec{KeySpec::Dist::kUnique, 0, 1000};
  auto kb = KeyBatches::Create(spec, 300, 7, 4);
  ASSERT_TRUE(kb.ok()) << kb.status().ToString();
  std::set<uint64_t> all;
  for (int b = 0; b < 4; ++b) {  // 1200 keys: the 4th batch wraps around the 1000 keys
    std::span<const uint64_t> keys = kb->Next();
    std::set<uint64_t> mine(keys.begin(), keys.end());
    EXPECT_EQ(mine.size(), keys.size()) << "batch " << b << " repeats a key";
    all.insert(keys.begin(), keys.end());
  }
  EXPECT_EQ(all.size(), 1000u);
  std::set<uint64_t> space;
  for (uint64_t i = 0; i < 1000; ++i) space.insert(KeyOf(i));
  EXPECT_EQ(all, space);
  EXPECT_FALSE(KeyBatches::Create(spec, 1001, 7, 1).ok());  // more unique keys than the space
}

TEST(PsBenchKeys, ZipfFollowsItsExponent) {
  // P(rank 1) = 1 / H(n, s); for n = 1000, s = 1: H = 7.4855, so about 13.4%.
  const ZipfSampler z(1000, 1.0);
  Rng rng(3);
  int first = 0, in_range = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const uint64_t r = z.Sample(rng);
    in_range += r >= 1 && r <= 1000;
    first += r == 1;
  }
  EXPECT_EQ(in_range, n);
  EXPECT_NEAR(static_cast<double>(first) / n, 1.0 / 7.4855, 0.01);
  const ZipfSampler u(10, 0.0);  // s = 0: uniform
  int ones = 0;
  for (int i = 0; i < n; ++i) ones += u.Sample(rng) == 1;
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.1, 0.01);
}

TEST(PsBenchReport, WorkerResultsRoundTripAndMerge) {
  WorkerResult a;
  a.worker = 0;
  a.populated_rows = 10;
  OpResult op;
  op.op = BenchOp::kPush;
  op.keys_per_op = 100;
  op.iterations = 4;
  op.seconds = 0.5;
  op.keys = 400;
  op.unique_keys = 400;
  op.payload_bytes = 400 * 64;
  op.op_usec = {1, 2, 3, 4};
  a.ops.push_back(op);
  auto back = DecodeWorkerResult(EncodeWorkerResult(a));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ops.size(), 1u);
  EXPECT_EQ(back->ops[0].op_usec, op.op_usec);
  std::vector<uint8_t> cut = EncodeWorkerResult(a);
  cut.pop_back();
  EXPECT_FALSE(DecodeWorkerResult(cut).ok());
  WorkerResult b = a;
  b.worker = 1;
  auto merged = MergeResults({a, *back, b});
  ASSERT_TRUE(merged.ok());
  EXPECT_DOUBLE_EQ((*merged)[0].keys_per_sec, 3 * 800.0);
  EXPECT_EQ((*merged)[0].usec.count, 12u);
}

// A tiny job of the kernels over one backend configuration; returns worker 0's JSON, parsed.
nlohmann::json RunInProcess(const ferry::testing::BackendConfig& config, BenchOptions o) {
  o.transport = config.backend;
  o.transport_params = config.params;
  o.timeout = Millis(20000);
  EXPECT_TRUE(ValidateOptions(o).ok()) << ValidateOptions(o).ToString();
  std::optional<BenchReport> report;
  auto outcomes = ps::testing::RunJob(BuildJob(o), [&](ps::Node& node) -> Status {
    FERRY_ASSIGN_OR_RETURN(auto r, RunRank(node, o));
    if (r) report = std::move(r);
    return Status::Ok();
  });
  Status all = ps::testing::AllOk(outcomes);
  EXPECT_TRUE(all.ok()) << all.ToString();
  if (!report) return nlohmann::json();
  EXPECT_FALSE(FormatText(*report).empty());
  const std::string csv = FormatCsv(*report);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + static_cast<long>(o.ops.size()));
  nlohmann::json j =
      nlohmann::json::parse(FormatJson(*report), nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "the report is not valid JSON";
  return j;
}

class PsBenchJob : public ::testing::TestWithParam<ferry::testing::BackendConfig> {};

TEST_P(PsBenchJob, ThroughputTwoServersTwoWorkersChecked) {
  BenchOptions o;
  o.keys = 600;
  o.key_spec.space = 5000;
  o.iters = 4;
  o.warmup = 1;
  o.servers = 2;
  o.workers = 2;
  const nlohmann::json j = RunInProcess(GetParam(), o);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["tool"], "ferry-ps-bench");
  EXPECT_EQ(j["job"]["servers"], 2);
  EXPECT_EQ(j["populate"]["rows"], 5000);
  EXPECT_GT(j["check"]["rows_checked"].get<uint64_t>(), 2u * 2 * 600);
  ASSERT_EQ(j["results"].size(), 3u);
  for (const auto& r : j["results"]) {
    EXPECT_GT(r["keys_per_sec"].get<double>(), 0) << r["op"];
    EXPECT_GT(r["gb_per_sec"].get<double>(), 0) << r["op"];
    EXPECT_EQ(r["iterations"], 8);  // 4 per worker
    EXPECT_EQ(r["worker_keys_per_sec"].size(), 2u);
    EXPECT_GE(r["latency_usec"]["p99"].get<double>(), r["latency_usec"]["p50"].get<double>());
    EXPECT_EQ(r["unique_keys_per_op"].get<double>(), 600.0);
  }
  EXPECT_EQ(j["workers"].size(), 2u);
}

TEST_P(PsBenchJob, ZipfKeysWithRepeatsChecked) {
  BenchOptions o;
  o.keys = 800;
  o.key_spec = KeySpec{KeySpec::Dist::kZipf, 1.1, 3000};
  o.iters = 3;
  o.warmup = 1;
  o.populate = false;  // first touches insert rows
  o.optimizer.kind = ps::Optimizer::kFtrl;
  const nlohmann::json j = RunInProcess(GetParam(), o);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["config"]["key_distribution"], "zipf");
  for (const auto& r : j["results"]) {
    EXPECT_LT(r["unique_keys_per_op"].get<double>(), 800.0) << "Zipf batches repeat keys";
  }
}

TEST_P(PsBenchJob, SingleKeyLatency) {
  BenchOptions o;
  o.latency = true;
  o.keys = 1;
  o.key_spec.space = 2000;
  o.iters = 50;
  o.warmup = 5;
  const nlohmann::json j = RunInProcess(GetParam(), o);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["mode"], "latency");
  for (const auto& r : j["results"]) {
    EXPECT_EQ(r["latency_usec"]["count"], 50);
    EXPECT_GT(r["latency_usec"]["min"].get<double>(), 0);
  }
}

// The checked pass must notice rows that are not what it expects: push into every row of the
// key space before the benchmark starts, so no pulled row equals the initializer's.
TEST(PsBenchCheck, CatchesRowsThatDifferFromTheInitializer) {
  BenchOptions o;
  o.keys = 100;
  o.key_spec.space = 500;
  o.iters = 1;
  o.warmup = 0;
  o.populate = false;
  o.transport = "tcp";
  o.timeout = Millis(20000);
  Status bench_status;
  auto outcomes = ps::testing::RunJob(BuildJob(o), [&](ps::Node& node) -> Status {
    ps::Worker* w = node.worker();
    if (w == nullptr) return Status::Ok();
    std::vector<uint64_t> keys;
    for (uint64_t i = 0; i < o.key_spec.space; ++i) keys.push_back(KeyOf(i));
    const std::vector<float> grads(keys.size() * o.dim, 0.5f);
    FERRY_ASSIGN_OR_RETURN(ps::Ticket t, w->Push(0, keys, grads));
    FERRY_RETURN_IF_ERROR(w->Wait(t));
    w->Release(t);
    bench_status = RunRank(node, o).status();
    return Status::Ok();
  });
  EXPECT_TRUE(ps::testing::AllOk(outcomes).ok()) << ps::testing::AllOk(outcomes).ToString();
  EXPECT_EQ(bench_status.code(), Code::kProtocol) << bench_status.ToString();
  EXPECT_NE(bench_status.message().find("verification failed"), std::string::npos)
      << bench_status.ToString();
}

std::vector<ferry::testing::BackendConfig> LocalConfigs() {
  std::vector<ferry::testing::BackendConfig> out;
  for (const auto& c : ferry::testing::SelectedConfigs().run) {
    if (!c.needs_rdma) out.push_back(c);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Local, PsBenchJob, ::testing::ValuesIn(LocalConfigs()),
                         [](const auto& info) { return info.param.TestName(); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PsBenchJob);

int RunCommand(const std::vector<std::string>& argv) {
  std::string cmd;
  for (const std::string& a : argv) cmd += "'" + a + "' ";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
}

TEST(PsBenchTool, UnderTheLauncherTwoServersTwoWorkers) {
  if (g_launcher.empty() || g_bench.empty()) GTEST_SKIP() << "no launcher/tool paths given";
  const std::string out = "/tmp/psbench-smoke-" + std::to_string(getpid()) + ".json";
  const int rc =
      RunCommand({g_launcher,  "4", "--timeout",   "120", "--",     g_bench, "--servers",   "2",
                  "--workers", "2", "--transport", "tcp", "--keys", "1000",  "--key-space", "10000",
                  "--iters",   "3", "--warmup",    "1",   "--json", out});
  ASSERT_EQ(rc, 0);
  const nlohmann::json j = ReadJson(out);
  std::remove(out.c_str());
  ASSERT_FALSE(j.is_discarded()) << "--json wrote invalid JSON";
  EXPECT_EQ(j["job"]["ranks"], 4);
  EXPECT_EQ(j["job"]["launcher"], "ferry-launch");
  EXPECT_EQ(j["transport"], "tcp");
  EXPECT_EQ(j["results"].size(), 3u);
}

TEST(PsBenchTool, UnderFerryLaunchJsonOnStdout) {
  if (g_ferry_launch.empty() || g_bench.empty()) GTEST_SKIP() << "ferry-launch is not built";
  const std::string out = "/tmp/psbench-launch-" + std::to_string(getpid()) + ".json";
  // The shape comes from ferry-launch's variables (two shard servers per server rank too:
  // FERRY_SERVER_THREADS); stdout carries the JSON alone.
  const std::string cmd = "'" + g_ferry_launch + "' --servers 2 --workers 2 --transport tcp " +
                          "--server-threads 2 " + "--timeout 120 -- '" + g_bench +
                          "' --keys 1000 --key-space 10000 " + "--iters 3 --warmup 1 --json > '" +
                          out + "'";
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << cmd;
  const nlohmann::json j = ReadJson(out);
  std::remove(out.c_str());
  ASSERT_FALSE(j.is_discarded()) << "stdout of `ferry-launch ... -- ferry-ps-bench --json` is not "
                                    "one valid JSON object";
  EXPECT_EQ(j["job"]["servers"], 2);
  EXPECT_EQ(j["job"]["server_threads"], 2);
  EXPECT_EQ(j["job"]["workers"], 2);
  EXPECT_EQ(j["transport"], "tcp");
  EXPECT_EQ(j["results"].size(), 3u);
}

TEST(PsBenchTool, ReferenceProgram) {
  if (g_reference.empty()) GTEST_SKIP() << "no ps_reference path given";
  const std::string out = "/tmp/psbench-ref-" + std::to_string(getpid()) + ".json";
  ASSERT_EQ(RunCommand({g_reference, "--keys", "1000", "--key-space", "10000", "--iters", "3",
                        "--warmup", "1", "--json", out}),
            0);
  const nlohmann::json j = ReadJson(out);
  std::remove(out.c_str());
  ASSERT_FALSE(j.is_discarded());
  ASSERT_EQ(j["results"].size(), 3u);
  EXPECT_EQ(j["results"][0]["op"], "gather");
  EXPECT_EQ(j["results"][2]["op"], "adagrad");
  EXPECT_EQ(j["config"]["row_stride"], 152);  // 24 B metadata + 16 weights + 16 Adagrad floats
  // The update by two threads, each owning one partition's table (as two shard servers).
  ASSERT_EQ(RunCommand({g_reference, "--op", "update", "--threads", "2", "--keys", "1000",
                        "--key-space", "10000", "--iters", "3", "--warmup", "1", "--json", out}),
            0);
  const nlohmann::json t = ReadJson(out);
  std::remove(out.c_str());
  ASSERT_FALSE(t.is_discarded());
  ASSERT_EQ(t["results"].size(), 1u);
  EXPECT_EQ(t["results"][0]["op"], "adagrad-x2");
  EXPECT_EQ(t["config"]["threads"], 2);
  EXPECT_GT(t["results"][0]["keys_per_sec"], 0);
  EXPECT_NE(RunCommand({g_reference, "--op", "gather", "--threads", "2"}), 0);  // update only
}

}  // namespace
}  // namespace ferry::psbench

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc > 1) ferry::psbench::g_launcher = argv[1];
  if (argc > 2) ferry::psbench::g_bench = argv[2];
  if (argc > 3) ferry::psbench::g_reference = argv[3];
  if (argc > 4) ferry::psbench::g_ferry_launch = argv[4];
  return RUN_ALL_TESTS();
}
