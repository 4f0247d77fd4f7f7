// ferry-info end to end: --json parses and describes tcp and the topology; bad flags fail
// loudly. The binary's path comes from meson in FERRY_INFO.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

RunResult RunInfo(const std::string& args) {
  RunResult r;
  const char* bin = std::getenv("FERRY_INFO");
  if (bin == nullptr) {
    ADD_FAILURE() << "FERRY_INFO is not set (run through meson test)";
    return r;
  }
  std::string err_file = ::testing::TempDir() + "ferry_info_stderr_" + std::to_string(getpid());
  std::string cmd = std::string("'") + bin + "' " + args + " 2>'" + err_file + "'";
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) {
    ADD_FAILURE() << "popen failed for " << cmd;
    return r;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) r.out.append(buf, n);
  int status = pclose(f);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::ifstream e(err_file);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  std::remove(err_file.c_str());
  return r;
}

TEST(FerryInfo, JsonDescribesTcpAndTopology) {
  RunResult r = RunInfo("--json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json doc;
  ASSERT_NO_THROW(doc = nlohmann::json::parse(r.out)) << r.out;
  ASSERT_TRUE(doc["backends"].is_array());
  const nlohmann::json* tcp = nullptr;
  for (const auto& b : doc["backends"]) {
    EXPECT_TRUE(b["name"].is_string());
    EXPECT_TRUE(b["available"].is_boolean());
    EXPECT_TRUE(b["priority"].is_number_integer());
    if (!b["available"].get<bool>()) {
      EXPECT_FALSE(b["reason"].get<std::string>().empty());
    }
    if (b["name"] == "tcp") tcp = &b;
  }
  ASSERT_NE(tcp, nullptr) << "no tcp backend listed";
  EXPECT_TRUE((*tcp)["available"].get<bool>());
  ASSERT_TRUE((*tcp)["created"].get<bool>()) << (*tcp).dump();
  EXPECT_TRUE((*tcp)["capabilities"]["send_recv"].get<bool>());
  EXPECT_GT((*tcp)["capabilities"]["max_message_size"].get<uint64_t>(), 0u);
  EXPECT_TRUE((*tcp)["devices"].is_array());

  const auto& topo = doc["topology"];
  ASSERT_TRUE(topo["loaded"].get<bool>()) << topo.dump();
  EXPECT_GE(topo["pus"].get<unsigned>(), 1u);
  EXPECT_GE(topo["cores"].get<unsigned>(), 1u);
  ASSERT_GE(topo["numa_nodes"].size(), 1u);
  unsigned pus = 0;
  for (const auto& n : topo["numa_nodes"]) {
    EXPECT_TRUE(n["cpuset"].is_string());
    EXPECT_TRUE(n["devices"].is_array());
    pus += n["pus"].get<unsigned>();
  }
  EXPECT_EQ(pus, topo["pus"].get<unsigned>());
  for (const auto& d : topo["devices"]) {
    EXPECT_TRUE(d["kind"] == "netdev" || d["kind"] == "rdma") << d.dump();
    EXPECT_TRUE(d["numa_node"].is_number_integer());
  }
}

TEST(FerryInfo, BackendFilter) {
  RunResult r = RunInfo("--json --backend tcp");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << r.out;
  ASSERT_EQ(doc["backends"].size(), 1u);
  EXPECT_EQ(doc["backends"][0]["name"], "tcp");
}

TEST(FerryInfo, HumanOutputHasSections) {
  RunResult r = RunInfo("");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Backends"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Backend tcp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Topology"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NUMA nodes"), std::string::npos) << r.out;
}

TEST(FerryInfo, WrongFlagFailsWithAMessage) {
  RunResult r = RunInfo("--no-such-flag");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no-such-flag"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(FerryInfo, UnknownBackendFailsWithAMessage) {
  RunResult r = RunInfo("--backend nosuch");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unknown backend 'nosuch'"), std::string::npos) << r.err;
}

TEST(FerryInfo, MissingOptionValueFails) {
  RunResult r = RunInfo("--backend");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(r.err.empty());
}

}  // namespace
