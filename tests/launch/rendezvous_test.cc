// ps/launch/rendezvous.h without a launcher: the address rules with a fake start_on_rank0 (the real
// listeners and launchers are exercised by rendezvous_probe under mpirun and srun).
#include "ps/launch/rendezvous.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace ferry::ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Records the bind addresses it is asked for and answers with `bound` (or the bind address with
// port 41000 when port 0 was asked for).
struct FakeStart {
  std::vector<std::string> calls;
  Status fail;

  StartCoordinatorFn Fn() {
    return [this](const std::string& bind) -> Result<std::string> {
      calls.push_back(bind);
      if (!fail.ok()) return fail;
      if (bind.ends_with(":0")) return bind.substr(0, bind.size() - 2) + ":41000";
      return bind;
    };
  }
};

LaunchEnv Env(Launcher launcher, int rank, int size) {
  LaunchEnv env;
  env.launcher = launcher;
  env.rank = rank;
  env.size = size;
  env.local_rank = rank;
  env.local_size = size;
  return env;
}

constexpr Millis kTimeout{2000};

TEST(RendezvousTest, CoordinatorVariableNumericHostIsBound) {
  LaunchEnv env = Env(Launcher::kMpirun, 0, 4);
  env.coordinator = "127.0.0.1:4000";
  FakeStart start;
  auto address = FindCoordinator(env, start.Fn(), kTimeout);
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_EQ(*address, "127.0.0.1:4000");
  EXPECT_THAT(start.calls, ElementsAre("127.0.0.1:4000"));
}

TEST(RendezvousTest, CoordinatorVariableHostNameBindsWildcard) {
  LaunchEnv env = Env(Launcher::kSrun, 0, 4);
  env.coordinator = "node1:4000";
  env.pmix = true;  // the variable wins over PMIx
  FakeStart start;
  auto address = FindCoordinator(env, start.Fn(), kTimeout);
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_EQ(*address, "node1:4000");
  EXPECT_THAT(start.calls, ElementsAre("0.0.0.0:4000"));
}

TEST(RendezvousTest, CoordinatorVariableIpv6) {
  LaunchEnv env = Env(Launcher::kFerry, 0, 2);
  env.coordinator = "[::1]:4000";
  FakeStart start;
  auto address = FindCoordinator(env, start.Fn(), kTimeout);
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_EQ(*address, "[::1]:4000");
  EXPECT_THAT(start.calls, ElementsAre("[::1]:4000"));
}

TEST(RendezvousTest, CoordinatorVariableOtherRanksDoNotStart) {
  LaunchEnv env = Env(Launcher::kMpirun, 3, 4);
  env.coordinator = "node1:4000";
  FakeStart start;
  auto address = FindCoordinator(env, start.Fn(), kTimeout);
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_EQ(*address, "node1:4000");
  EXPECT_TRUE(start.calls.empty());
}

TEST(RendezvousTest, CoordinatorVariableErrors) {
  for (const char* bad : {"node1", "node1:", ":4000", "node1:0", "node1:65536", "node1:40x",
                          "::1:4000", "[::1]4000"}) {
    LaunchEnv env = Env(Launcher::kMpirun, 1, 4);
    env.coordinator = bad;
    FakeStart start;
    auto address = FindCoordinator(env, start.Fn(), kTimeout);
    ASSERT_FALSE(address.ok()) << bad;
    EXPECT_EQ(address.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_THAT(address.status().message(), HasSubstr("FERRY_COORDINATOR")) << bad;
  }
}

TEST(RendezvousTest, StartFailureSaysWhatToSet) {
  LaunchEnv env = Env(Launcher::kMpirun, 0, 4);
  env.coordinator = "node1:4000";
  FakeStart start;
  start.fail = IoError("bind 0.0.0.0:4000", EADDRINUSE);
  auto address = FindCoordinator(env, start.Fn(), kTimeout);
  ASSERT_FALSE(address.ok());
  EXPECT_EQ(address.status().code(), Code::kIoError);
  EXPECT_THAT(address.status().message(), HasSubstr("free port"));
}

TEST(RendezvousTest, StartReturningAnotherPortIsABug) {
  LaunchEnv env = Env(Launcher::kMpirun, 0, 4);
  env.coordinator = "127.0.0.1:4000";
  auto address = FindCoordinator(
      env, [](const std::string&) -> Result<std::string> { return std::string("127.0.0.1:4001"); },
      kTimeout);
  ASSERT_FALSE(address.ok());
  EXPECT_EQ(address.status().code(), Code::kInternal);
}

class CoordinatorFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ferry-rendezvous-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    file_ = dir_ + "/coordinator";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Read() {
    std::ifstream in(file_);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return s;
  }
  size_t Entries() {
    size_t n = 0;
    for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir_)) ++n;
    return n;
  }

  std::string dir_;
  std::string file_;
};

TEST_F(CoordinatorFileTest, Rank0BindsLoopbackAndWritesTheBoundAddress) {
  LaunchEnv env = Env(Launcher::kFerry, 0, 4);
  env.coordinator_file = file_;
  FakeStart start;
  auto address = FindCoordinator(env, start.Fn(), kTimeout);
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_EQ(*address, "127.0.0.1:41000");
  EXPECT_THAT(start.calls, ElementsAre("127.0.0.1:0"));
  EXPECT_EQ(Read(), "127.0.0.1:41000\n");
  EXPECT_EQ(Entries(), 1u);  // the temporary file was renamed, not left behind
}

TEST_F(CoordinatorFileTest, WildcardBindAdvertisesTheConfiguredHost) {
  LaunchEnv env = Env(Launcher::kFerry, 0, 4);
  env.coordinator_file = file_;
  env.coordinator_bind = "0.0.0.0:0";
  env.coordinator_host = "head.example";
  FakeStart start;
  auto address = FindCoordinator(env, start.Fn(), kTimeout);
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_EQ(*address, "head.example:41000");
  EXPECT_THAT(start.calls, ElementsAre("0.0.0.0:0"));
  EXPECT_EQ(Read(), "head.example:41000\n");
}

TEST_F(CoordinatorFileTest, WildcardBindOnOneHostAdvertisesLoopback) {
  LaunchEnv env = Env(Launcher::kFerry, 0, 4);
  env.coordinator_file = file_;
  env.coordinator_bind = "0.0.0.0:0";
  FakeStart start;
  auto address = FindCoordinator(env, start.Fn(), kTimeout);
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_EQ(*address, "127.0.0.1:41000");
}

TEST_F(CoordinatorFileTest, UnwritableFileIsAnIoError) {
  LaunchEnv env = Env(Launcher::kFerry, 0, 4);
  env.coordinator_file = dir_ + "/missing-folder/coordinator";
  FakeStart start;
  auto address = FindCoordinator(env, start.Fn(), kTimeout);
  ASSERT_FALSE(address.ok());
  EXPECT_EQ(address.status().code(), Code::kIoError);
  EXPECT_THAT(address.status().message(), HasSubstr("FERRY_COORDINATOR_FILE"));
}

TEST_F(CoordinatorFileTest, OtherRanksWaitForTheFile) {
  LaunchEnv env = Env(Launcher::kFerry, 2, 4);
  env.coordinator_file = file_;
  std::thread writer([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ofstream(file_ + ".tmp") << "127.0.0.1:41234\n";
    std::filesystem::rename(file_ + ".tmp", file_);
  });
  FakeStart start;
  auto address = FindCoordinator(env, start.Fn(), kTimeout);
  writer.join();
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_EQ(*address, "127.0.0.1:41234");
  EXPECT_TRUE(start.calls.empty());
}

TEST_F(CoordinatorFileTest, OtherRanksTimeOut) {
  LaunchEnv env = Env(Launcher::kFerry, 1, 2);
  env.coordinator_file = file_;
  FakeStart start;
  auto address = FindCoordinator(env, start.Fn(), Millis(100));
  ASSERT_FALSE(address.ok());
  EXPECT_EQ(address.status().code(), Code::kTimeout);
  EXPECT_THAT(address.status().message(), HasSubstr("FERRY_COORDINATOR"));
}

TEST(RendezvousTest, SingleProcessBindsLoopbackAnyPort) {
  FakeStart start;
  auto address = FindCoordinator(LaunchEnv{}, start.Fn(), kTimeout);
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_EQ(*address, "127.0.0.1:41000");
  EXPECT_THAT(start.calls, ElementsAre("127.0.0.1:0"));
}

LaunchEnv SlurmEnv(int rank, std::vector<std::string> nodes) {
  LaunchEnv env = Env(Launcher::kSrun, rank, 4);
  env.local_size = nodes.size() == 1 ? 4 : 2;
  env.local_rank = rank % env.local_size;
  env.nodes = std::move(nodes);
  env.job_id = "1234";
  env.step_id = "0";
  env.node_name = env.nodes[static_cast<size_t>(rank / env.local_size)];
  return env;
}

TEST(RendezvousTest, SlurmDerivedPortOneNode) {
  const std::string port = std::to_string(DerivedCoordinatorPort("1234", "0"));
  FakeStart start;
  auto address = FindCoordinator(SlurmEnv(0, {"vm"}), start.Fn(), kTimeout);
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_EQ(*address, "127.0.0.1:" + port);
  EXPECT_THAT(start.calls, ElementsAre("0.0.0.0:" + port));

  FakeStart other;
  address = FindCoordinator(SlurmEnv(3, {"vm"}), other.Fn(), kTimeout);
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_EQ(*address, "127.0.0.1:" + port);
  EXPECT_TRUE(other.calls.empty());
}

TEST(RendezvousTest, SlurmDerivedPortFirstNode) {
  const std::string port = std::to_string(DerivedCoordinatorPort("1234", "0"));
  for (int rank = 0; rank < 4; ++rank) {
    FakeStart start;
    auto address = FindCoordinator(SlurmEnv(rank, {"n01", "n02"}), start.Fn(), kTimeout);
    ASSERT_TRUE(address.ok()) << address.status().ToString();
    EXPECT_EQ(*address, "n01:" + port);
    EXPECT_EQ(start.calls.size(), rank == 0 ? 1u : 0u);
  }
}

TEST(RendezvousTest, SlurmRank0OffTheFirstNode) {
  LaunchEnv env = SlurmEnv(0, {"n01", "n02"});
  env.node_name = "n02";
  FakeStart start;
  auto address = FindCoordinator(env, start.Fn(), kTimeout);
  ASSERT_FALSE(address.ok());
  EXPECT_THAT(address.status().message(), HasSubstr("FERRY_COORDINATOR_HOST=n02"));
  env.coordinator_host = "n02";
  address = FindCoordinator(env, start.Fn(), kTimeout);
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_THAT(*address, ::testing::StartsWith("n02:"));
}

TEST(RendezvousTest, SlurmPortInUseSaysWhatToDo) {
  FakeStart start;
  start.fail = IoError("bind", EADDRINUSE);
  auto address = FindCoordinator(SlurmEnv(0, {"vm"}), start.Fn(), kTimeout);
  ASSERT_FALSE(address.ok());
  EXPECT_THAT(address.status().message(), HasSubstr("FERRY_COORDINATOR=host:port"));
  EXPECT_THAT(address.status().message(), HasSubstr("--mpi=pmix"));
}

TEST(RendezvousTest, SlurmWithoutJobIdIsAnError) {
  LaunchEnv env = SlurmEnv(1, {"vm"});
  env.job_id.clear();
  FakeStart start;
  auto address = FindCoordinator(env, start.Fn(), kTimeout);
  ASSERT_FALSE(address.ok());
  EXPECT_THAT(address.status().message(), HasSubstr("FERRY_COORDINATOR"));
}

TEST(RendezvousTest, MpirunWithoutPmixAsksForTheVariable) {
  LaunchEnv env = Env(Launcher::kMpirun, 1, 4);
  env.pmix = false;
  FakeStart start;
  auto address = FindCoordinator(env, start.Fn(), kTimeout);
  ASSERT_FALSE(address.ok());
  EXPECT_EQ(address.status().code(), Code::kUnsupported);
  EXPECT_THAT(address.status().message(), HasSubstr("FERRY_COORDINATOR=host:port"));
}

TEST(RendezvousTest, FerryLaunchWithoutVariables) {
  FakeStart start;
  auto address = FindCoordinator(Env(Launcher::kFerry, 0, 2), start.Fn(), kTimeout);
  ASSERT_FALSE(address.ok());
  EXPECT_EQ(address.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(address.status().message(), HasSubstr("FERRY_COORDINATOR_FILE"));
  EXPECT_TRUE(start.calls.empty());
}

}  // namespace
}  // namespace ferry::ps
