// ps/launch/launch_env.h: launcher detection through an injected getenv, hostlist expansion and the
// derived coordinator port.
#include "ps/launch/launch_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "ps/job/job.h"

namespace ferry::ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Vars = std::map<std::string, std::string>;

Result<LaunchEnv> Detect(const Vars& vars) {
  return DetectLaunchEnv([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

// What `mpirun -np 4` sets for rank 2 (OpenMPI 4.1, PMIx variables included).
Vars Mpirun(int rank) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_SIZE", "4"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
          {"PMIX_NAMESPACE", "2008481793"},
          {"PMIX_RANK", std::to_string(rank)}};
}

// What `srun -N2 -n5` sets for a task on the second node (measured on Slurm 22.05).
Vars Srun() {
  return {{"SLURM_PROCID", "4"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "1"},
          {"SLURM_NTASKS", "5"},
          {"SLURM_STEP_NUM_TASKS", "5"},
          {"SLURM_STEP_TASKS_PER_NODE", "3,2"},
          {"SLURM_STEP_NODELIST", "node[07-08]"},
          {"SLURM_JOB_NODELIST", "node[07-09]"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_JOB_ID", "1234"},
          {"SLURM_STEP_ID", "0"},
          {"SLURMD_NODENAME", "node08"}};
}

TEST(LaunchEnvTest, NoLauncherIsRankZeroOfOne) {
  auto env = Detect({});
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->launcher, Launcher::kNone);
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->size, 1);
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->local_size, 1);
  EXPECT_FALSE(env->pmix);
  EXPECT_TRUE(env->nodes.empty());
}

TEST(LaunchEnvTest, LauncherNames) {
  EXPECT_EQ(LauncherName(Launcher::kNone), "none");
  EXPECT_EQ(LauncherName(Launcher::kFerry), "ferry-launch");
  EXPECT_EQ(LauncherName(Launcher::kMpirun), "mpirun");
  EXPECT_EQ(LauncherName(Launcher::kSrun), "srun");
}

TEST(LaunchEnvTest, FerryLaunch) {
  auto env = Detect({{"FERRY_RANK", "3"},
                     {"FERRY_SIZE", "8"},
                     {"FERRY_COORDINATOR", "127.0.0.1:4000"},
                     {"FERRY_COORDINATOR_FILE", "/tmp/x"},
                     {"FERRY_COORDINATOR_BIND", "0.0.0.0:0"},
                     {"FERRY_COORDINATOR_HOST", "head"}});
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->launcher, Launcher::kFerry);
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->size, 8);
  EXPECT_EQ(env->local_rank, 3);  // defaults: ferry-launch is one host
  EXPECT_EQ(env->local_size, 8);
  EXPECT_EQ(env->coordinator, "127.0.0.1:4000");
  EXPECT_EQ(env->coordinator_file, "/tmp/x");
  EXPECT_EQ(env->coordinator_bind, "0.0.0.0:0");
  EXPECT_EQ(env->coordinator_host, "head");
}

TEST(LaunchEnvTest, FerryLaunchLocalRank) {
  auto env = Detect({{"FERRY_RANK", "5"},
                     {"FERRY_SIZE", "8"},
                     {"FERRY_LOCAL_RANK", "1"},
                     {"FERRY_LOCAL_SIZE", "4"}});
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_size, 4);
}

TEST(LaunchEnvTest, Mpirun) {
  auto env = Detect(Mpirun(2));
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->launcher, Launcher::kMpirun);
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->size, 4);
  EXPECT_EQ(env->local_rank, 2);
  EXPECT_EQ(env->local_size, 4);
  EXPECT_TRUE(env->pmix);
  EXPECT_TRUE(env->job_id.empty());  // Slurm fields only for srun tasks
}

TEST(LaunchEnvTest, MpirunWithoutLocalVariables) {
  auto env = Detect({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->local_size, 1);
  EXPECT_FALSE(env->pmix);
}

TEST(LaunchEnvTest, Srun) {
  auto env = Detect(Srun());
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->launcher, Launcher::kSrun);
  EXPECT_EQ(env->rank, 4);
  EXPECT_EQ(env->size, 5);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_size, 2);                             // second entry of "3,2"
  EXPECT_THAT(env->nodes, ElementsAre("node07", "node08"));  // the step's, not the job's
  EXPECT_EQ(env->job_id, "1234");
  EXPECT_EQ(env->step_id, "0");
  EXPECT_EQ(env->node_name, "node08");
  EXPECT_FALSE(env->pmix);
}

TEST(LaunchEnvTest, SrunStepSizeBeatsJobSize) {
  Vars v = Srun();
  v["SLURM_NTASKS"] = "64";  // the allocation's, when the step uses fewer tasks
  auto env = Detect(v);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->size, 5);
}

TEST(LaunchEnvTest, SrunRepeatedTasksPerNode) {
  Vars v = Srun();
  v["SLURM_STEP_NODELIST"] = "n[1-4]";
  v["SLURM_STEP_NUM_TASKS"] = "7";
  v["SLURM_STEP_TASKS_PER_NODE"] = "2(x3),1";
  v["SLURM_NODEID"] = "3";
  v["SLURM_PROCID"] = "6";
  v["SLURM_LOCALID"] = "0";
  auto env = Detect(v);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->local_size, 1);
  v["SLURM_NODEID"] = "2";
  v["SLURM_PROCID"] = "5";
  v["SLURM_LOCALID"] = "1";
  env = Detect(v);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->local_size, 2);
}

TEST(LaunchEnvTest, SrunMinimalOneNode) {
  // Older variable spellings, no tasks-per-node: a one-node step holds every task.
  auto env = Detect({{"SLURM_PROCID", "1"},
                     {"SLURM_NPROCS", "3"},
                     {"SLURM_STEPID", "2"},
                     {"SLURM_JOBID", "77"},
                     {"SLURM_NODELIST", "vm"},
                     {"PMIX_NAMESPACE", "slurm.pmix.77.2"},
                     {"PMIX_RANK", "1"}});
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->launcher, Launcher::kSrun);
  EXPECT_EQ(env->size, 3);
  EXPECT_EQ(env->local_size, 3);
  EXPECT_EQ(env->job_id, "77");
  EXPECT_EQ(env->step_id, "2");
  EXPECT_THAT(env->nodes, ElementsAre("vm"));
  EXPECT_TRUE(env->pmix);
}

TEST(LaunchEnvTest, BatchScriptShellIsNotATask) {
  // sbatch's shell has SLURM_PROCID=0 and SLURM_NTASKS but no step id.
  auto env = Detect({{"SLURM_PROCID", "0"},
                     {"SLURM_NTASKS", "2"},
                     {"SLURM_JOB_ID", "4"},
                     {"SLURM_JOB_NODELIST", "vm"}});
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->launcher, Launcher::kNone);
  EXPECT_EQ(env->size, 1);
}

TEST(LaunchEnvTest, PrecedenceFerryOverMpirunOverSrun) {
  Vars v = Srun();
  for (auto& [k, val] : Mpirun(1)) v[k] = val;
  auto env = Detect(v);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->launcher, Launcher::kMpirun);
  EXPECT_EQ(env->rank, 1);
  EXPECT_TRUE(env->nodes.empty());

  v["FERRY_RANK"] = "0";
  v["FERRY_SIZE"] = "2";
  env = Detect(v);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->launcher, Launcher::kFerry);
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->size, 2);
  EXPECT_TRUE(env->pmix);  // reported whatever the launcher
}

TEST(LaunchEnvTest, PmixAloneIsUnsupported) {
  auto env = Detect({{"PMIX_NAMESPACE", "ns"}, {"PMIX_RANK", "3"}});
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), Code::kUnsupported);
  EXPECT_THAT(env.status().message(), HasSubstr("PMIX_RANK"));
  EXPECT_THAT(env.status().message(), HasSubstr("FERRY_SIZE"));
}

struct BadCase {
  Vars vars;
  std::string names;  // the variable the message must name
};

class LaunchEnvBadTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(LaunchEnvBadTest, IsInvalidArgumentNamingTheVariable) {
  auto env = Detect(GetParam().vars);
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), Code::kInvalidArgument) << env.status().ToString();
  EXPECT_THAT(env.status().message(), HasSubstr(GetParam().names));
}

Vars With(Vars v, const std::string& key, const std::string& value) {
  v[key] = value;
  return v;
}
Vars Without(Vars v, const std::string& key) {
  v.erase(key);
  return v;
}

INSTANTIATE_TEST_SUITE_P(
    Values, LaunchEnvBadTest,
    ::testing::Values(
        BadCase{{{"FERRY_RANK", "4"}, {"FERRY_SIZE", "4"}}, "FERRY_RANK='4'"},
        BadCase{{{"FERRY_RANK", "-1"}, {"FERRY_SIZE", "4"}}, "FERRY_RANK='-1'"},
        BadCase{{{"FERRY_RANK", "x"}, {"FERRY_SIZE", "4"}}, "FERRY_RANK='x'"},
        BadCase{{{"FERRY_RANK", ""}, {"FERRY_SIZE", "4"}}, "FERRY_RANK=''"},
        BadCase{{{"FERRY_RANK", "1 "}, {"FERRY_SIZE", "4"}}, "FERRY_RANK='1 '"},
        BadCase{{{"FERRY_RANK", "+1"}, {"FERRY_SIZE", "4"}}, "FERRY_RANK='+1'"},
        BadCase{{{"FERRY_RANK", "0"}, {"FERRY_SIZE", "0"}}, "FERRY_SIZE='0'"},
        BadCase{{{"FERRY_RANK", "0"}, {"FERRY_SIZE", "99999999999"}}, "FERRY_SIZE"},
        BadCase{{{"FERRY_RANK", "0"}}, "FERRY_SIZE is not set"},
        BadCase{{{"FERRY_SIZE", "2"}}, "FERRY_RANK is not set"},
        BadCase{{{"FERRY_RANK", "0"}, {"FERRY_SIZE", "2"}, {"FERRY_LOCAL_RANK", "2"}},
                "FERRY_LOCAL_RANK='2'"},
        BadCase{{{"FERRY_RANK", "0"}, {"FERRY_SIZE", "2"}, {"FERRY_LOCAL_SIZE", "3"}},
                "FERRY_LOCAL_SIZE='3'"},
        BadCase{With(Mpirun(0), "OMPI_COMM_WORLD_RANK", "4"), "OMPI_COMM_WORLD_RANK='4'"},
        BadCase{With(Mpirun(0), "OMPI_COMM_WORLD_SIZE", "four"), "OMPI_COMM_WORLD_SIZE='four'"},
        BadCase{Without(Mpirun(0), "OMPI_COMM_WORLD_SIZE"), "OMPI_COMM_WORLD_SIZE is not set"},
        BadCase{With(Mpirun(0), "OMPI_COMM_WORLD_LOCAL_RANK", "-2"),
                "OMPI_COMM_WORLD_LOCAL_RANK='-2'"},
        BadCase{With(Srun(), "SLURM_PROCID", "5"), "SLURM_PROCID='5'"},
        BadCase{With(Srun(), "SLURM_STEP_NUM_TASKS", "1.5"), "SLURM_STEP_NUM_TASKS='1.5'"},
        BadCase{Without(Without(Srun(), "SLURM_STEP_NUM_TASKS"), "SLURM_NTASKS"),
                "SLURM_STEP_NUM_TASKS"},
        BadCase{With(Srun(), "SLURM_LOCALID", "2"), "SLURM_LOCALID='2'"},
        BadCase{With(Srun(), "SLURM_STEP_TASKS_PER_NODE", "3,x"), "SLURM_STEP_TASKS_PER_NODE"},
        BadCase{With(Srun(), "SLURM_STEP_TASKS_PER_NODE", "2(x3"), "SLURM_STEP_TASKS_PER_NODE"},
        BadCase{With(Srun(), "SLURM_NODEID", "2"), "SLURM_NODEID='2'"},
        BadCase{With(Srun(), "SLURM_STEP_NODELIST", "node[1-"), "SLURM_STEP_NODELIST"}));

TEST(HostlistTest, Plain) {
  auto hosts = ExpandHostlist("vm");
  ASSERT_TRUE(hosts.ok());
  EXPECT_THAT(*hosts, ElementsAre("vm"));
  hosts = ExpandHostlist("a,b,c.example.com");
  ASSERT_TRUE(hosts.ok());
  EXPECT_THAT(*hosts, ElementsAre("a", "b", "c.example.com"));
  hosts = ExpandHostlist("");
  ASSERT_TRUE(hosts.ok());
  EXPECT_TRUE(hosts->empty());
}

TEST(HostlistTest, RangesKeepPaddingAndSuffixes) {
  auto hosts = ExpandHostlist("n[01-03,7],m,x[1-2]-ib");
  ASSERT_TRUE(hosts.ok()) << hosts.status().ToString();
  EXPECT_THAT(*hosts, ElementsAre("n01", "n02", "n03", "n7", "m", "x1-ib", "x2-ib"));
}

TEST(HostlistTest, PaddingFollowsTheLowerBound) {
  auto hosts = ExpandHostlist("a[8-10],b[098-101],c[0]");
  ASSERT_TRUE(hosts.ok()) << hosts.status().ToString();
  EXPECT_THAT(*hosts, ElementsAre("a8", "a9", "a10", "b098", "b099", "b100", "b101", "c0"));
}

TEST(HostlistTest, MultipleGroupsLeftmostSlowest) {
  auto hosts = ExpandHostlist("r[1-2]n[1-2]");
  ASSERT_TRUE(hosts.ok()) << hosts.status().ToString();
  EXPECT_THAT(*hosts, ElementsAre("r1n1", "r1n2", "r2n1", "r2n2"));
  hosts = ExpandHostlist("rack[0,2]-node[08-09].ib,login");
  ASSERT_TRUE(hosts.ok()) << hosts.status().ToString();
  EXPECT_THAT(*hosts, ElementsAre("rack0-node08.ib", "rack0-node09.ib", "rack2-node08.ib",
                                  "rack2-node09.ib", "login"));
}

TEST(HostlistTest, Malformed) {
  for (const char* bad : {"n[1-", "n1-2]", "n[]", "n[[1]]", "n[1-2", "n[3-1]", "n[a-b]", "n[1,,2]",
                          "n[-1]", "n[1-]", "a,,b", "a,", ",a", "a b", "n[1:2]", "n[1-2-3]"}) {
    auto hosts = ExpandHostlist(bad);
    EXPECT_FALSE(hosts.ok()) << bad;
    EXPECT_EQ(hosts.status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(HostlistTest, HugeRangesAreRefused) {
  auto hosts = ExpandHostlist("n[0-99999999]");
  ASSERT_FALSE(hosts.ok());
  EXPECT_THAT(hosts.status().message(), HasSubstr("1M"));
  hosts = ExpandHostlist("a[0-999]b[0-999]c[0-9]");
  ASSERT_FALSE(hosts.ok());
}

TEST(DerivedPortTest, StableAndInRange) {
  // Fixed value: every rank, every build and every node must agree (FNV-1a of "1234.0").
  const uint16_t port = DerivedCoordinatorPort("1234", "0");
  EXPECT_EQ(port, 26395);
  EXPECT_EQ(port, DerivedCoordinatorPort(std::string("1234"), std::string("0")));
  std::set<uint16_t> seen;
  for (int job = 0; job < 200; ++job) {
    for (int step = 0; step < 5; ++step) {
      uint16_t p = DerivedCoordinatorPort(std::to_string(job), std::to_string(step));
      EXPECT_GE(p, 20000);
      EXPECT_LT(p, 40000);
      seen.insert(p);
    }
  }
  EXPECT_GT(seen.size(), 900u);  // steps of one job get different ports
  EXPECT_NE(DerivedCoordinatorPort("12", "34"), DerivedCoordinatorPort("123", "4"));
}

// ---- The job shape: FERRY_SERVERS, FERRY_WORKERS, FERRY_TRANSPORT, FERRY_ROLE_RULE.

Result<LaunchShape> Shape(const Vars& vars) {
  return ReadLaunchShape([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

LaunchEnv Env(Launcher launcher, int size) {
  LaunchEnv env;
  env.launcher = launcher;
  env.size = size;
  env.local_size = size;
  return env;
}

// A job as a program builds it from its flags; 0 = not given.
JobSpec Job(uint32_t servers, uint32_t workers) {
  JobSpec job;
  job.servers = servers;
  job.workers = workers;
  return job;
}

TEST(LaunchShapeTest, UnsetIsNotGiven) {
  auto shape = Shape({});
  ASSERT_TRUE(shape.ok()) << shape.status().ToString();
  EXPECT_EQ(shape->servers, -1);
  EXPECT_EQ(shape->workers, -1);
  EXPECT_EQ(shape->transport, "");
  EXPECT_EQ(shape->role_rule, "");
}

TEST(LaunchShapeTest, WhatFerryLaunchSets) {
  auto shape = Shape({{"FERRY_SERVERS", "2"},
                      {"FERRY_WORKERS", "3"},
                      {"FERRY_TRANSPORT", "tcp"},
                      {"FERRY_ROLE_RULE", "colocated"},
                      {"FERRY_SERVER_THREADS", "4"}});
  ASSERT_TRUE(shape.ok()) << shape.status().ToString();
  EXPECT_EQ(shape->servers, 2);
  EXPECT_EQ(shape->workers, 3);
  EXPECT_EQ(shape->transport, "tcp");
  EXPECT_EQ(shape->role_rule, "colocated");
  EXPECT_EQ(shape->server_threads, 4);
  JobSpec job = Job(2, 3);
  ASSERT_TRUE(ApplyLaunchShape(*shape, Env(Launcher::kFerry, 3), &job).ok());
  EXPECT_EQ(job.server_threads, 4u);
  EXPECT_EQ(job.shard_servers(), 8u);
}

struct BadShape {
  Vars vars;
  std::string names;
};
class LaunchShapeBadTest : public ::testing::TestWithParam<BadShape> {};

TEST_P(LaunchShapeBadTest, IsInvalidArgumentNamingTheVariable) {
  auto shape = Shape(GetParam().vars);
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.status().code(), Code::kInvalidArgument) << shape.status().ToString();
  EXPECT_THAT(shape.status().message(), HasSubstr(GetParam().names));
}

INSTANTIATE_TEST_SUITE_P(
    Values, LaunchShapeBadTest,
    ::testing::Values(BadShape{{{"FERRY_SERVERS", "two"}}, "FERRY_SERVERS='two'"},
                      BadShape{{{"FERRY_SERVERS", "0"}}, "FERRY_SERVERS='0'"},
                      BadShape{{{"FERRY_SERVERS", "-1"}}, "FERRY_SERVERS='-1'"},
                      BadShape{{{"FERRY_WORKERS", ""}}, "FERRY_WORKERS=''"},
                      BadShape{{{"FERRY_WORKERS", "3x"}}, "FERRY_WORKERS='3x'"},
                      BadShape{{{"FERRY_TRANSPORT", "rdma"}}, "FERRY_TRANSPORT='rdma'"},
                      BadShape{{{"FERRY_ROLE_RULE", "sideways"}}, "FERRY_ROLE_RULE='sideways'"},
                      BadShape{{{"FERRY_SERVER_THREADS", "0"}}, "FERRY_SERVER_THREADS='0'"}));

TEST(ApplyLaunchShapeTest, TheShapeOverridesTheJob) {
  LaunchShape shape;
  shape.servers = 2;
  shape.workers = 3;
  shape.transport = "tcp";
  shape.role_rule = "servers-first";
  JobSpec job = Job(1, 1);
  job.transport = "verbs";
  job.role_rule = RoleRule::kColocated;
  ASSERT_TRUE(ApplyLaunchShape(shape, Env(Launcher::kFerry, 5), &job).ok());
  EXPECT_EQ(job.servers, 2u);
  EXPECT_EQ(job.workers, 3u);
  EXPECT_EQ(job.transport, "tcp");
  EXPECT_EQ(job.role_rule, RoleRule::kServersFirst);
}

TEST(ApplyLaunchShapeTest, NoShapeKeepsAFittingJob) {
  JobSpec job = Job(1, 3);
  ASSERT_TRUE(ApplyLaunchShape(LaunchShape{}, Env(Launcher::kMpirun, 4), &job).ok());
  EXPECT_EQ(job.servers, 1u);
  EXPECT_EQ(job.workers, 3u);
  EXPECT_EQ(job.transport, "auto");
}

TEST(ApplyLaunchShapeTest, MpirunWithServersFromTheProgramDerivesWorkers) {
  // mpirun -np 4 prog --servers 2
  JobSpec job = Job(2, 0);
  Status s = ApplyLaunchShape(LaunchShape{}, Env(Launcher::kMpirun, 4), &job);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(job.servers, 2u);
  EXPECT_EQ(job.workers, 2u);
  EXPECT_EQ(RolesOf(job, 3, 4)->worker, 1);
}

// Join slots come after every other rank (spares before them), and need an elastic job.
TEST(RolesOfTest, JoinSlotsAreTheLastRanks) {
  JobSpec job = Job(2, 2);
  TableSpec t;
  t.name = "t";
  t.dim = 4;
  job.tables.push_back(t);
  job.elastic = true;
  job.join_slots = 2;
  ASSERT_TRUE(ValidateJob(job).ok()) << ValidateJob(job).ToString();
  EXPECT_EQ(RanksNeeded(job), 6);
  EXPECT_EQ(job.first_join_slot(), 2u);
  EXPECT_EQ(job.server_members(), 4u);
  EXPECT_EQ(RolesOf(job, 3, 6)->worker, 1);
  EXPECT_EQ(RolesOf(job, 4, 6)->join, 0);
  EXPECT_EQ(RolesOf(job, 5, 6)->join, 1);
  EXPECT_EQ(RolesOf(job, 5, 6)->server, -1);
  const uint64_t fingerprint = job.Fingerprint();
  job.join_slots = 1;
  EXPECT_NE(job.Fingerprint(), fingerprint);
  job.elastic = false;
  EXPECT_THAT(ValidateJob(job).ToString(), ::testing::HasSubstr("join slots need an elastic"));
  job.elastic = true;
  job.join_slots = 65;
  EXPECT_THAT(ValidateJob(job).ToString(), ::testing::HasSubstr("join_slots 65"));
  // Worker join slots come after the server join slots: worker `workers` + j.
  job.join_slots = 1;
  job.worker_join_slots = 2;
  ASSERT_TRUE(ValidateJob(job).ok()) << ValidateJob(job).ToString();
  EXPECT_EQ(RanksNeeded(job), 7);
  EXPECT_EQ(job.worker_members(), 4u);
  EXPECT_EQ(RolesOf(job, 4, 7)->join, 0);
  EXPECT_EQ(RolesOf(job, 5, 7)->worker, 2);
  EXPECT_TRUE(RolesOf(job, 5, 7)->worker_join);
  EXPECT_EQ(RolesOf(job, 6, 7)->worker, 3);
  EXPECT_FALSE(RolesOf(job, 3, 7)->worker_join);
  const uint64_t with_workers = job.Fingerprint();
  job.worker_join_slots = 1;
  EXPECT_NE(job.Fingerprint(), with_workers);
  job.elastic = false;
  job.join_slots = 0;
  EXPECT_THAT(ValidateJob(job).ToString(),
              ::testing::HasSubstr("worker join slots need an elastic job"));
  job.elastic = true;
  job.worker_join_slots = 65;
  EXPECT_THAT(ValidateJob(job).ToString(), ::testing::HasSubstr("worker_join_slots 65"));
}

TEST(ApplyLaunchShapeTest, SrunWithFerryServersDerivesWorkers) {
  // srun -n 5 --export=ALL,FERRY_SERVERS=1 prog
  LaunchShape shape;
  shape.servers = 1;
  JobSpec job = Job(3, 0);
  ASSERT_TRUE(ApplyLaunchShape(shape, Env(Launcher::kSrun, 5), &job).ok());
  EXPECT_EQ(job.servers, 1u);
  EXPECT_EQ(job.workers, 4u);
}

TEST(ApplyLaunchShapeTest, WorkersKnownDerivesServers) {
  JobSpec job = Job(0, 3);
  ASSERT_TRUE(ApplyLaunchShape(LaunchShape{}, Env(Launcher::kMpirun, 4), &job).ok());
  EXPECT_EQ(job.servers, 1u);
  EXPECT_EQ(job.workers, 3u);
}

TEST(ApplyLaunchShapeTest, ColocatedDerivesTheOtherCountAsTheSize) {
  LaunchShape shape;
  shape.role_rule = "colocated";
  JobSpec job = Job(2, 0);
  ASSERT_TRUE(ApplyLaunchShape(shape, Env(Launcher::kMpirun, 4), &job).ok());
  EXPECT_EQ(job.role_rule, RoleRule::kColocated);
  EXPECT_EQ(job.servers, 2u);
  EXPECT_EQ(job.workers, 4u);
}

TEST(ApplyLaunchShapeTest, AShapeThatDoesNotFitIsAnError) {
  LaunchShape shape;
  shape.servers = 2;
  shape.workers = 3;
  JobSpec job = Job(1, 1);
  Status s = ApplyLaunchShape(shape, Env(Launcher::kMpirun, 4), &job);
  ASSERT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("FERRY_SERVERS"));
  EXPECT_THAT(s.message(), HasSubstr("FERRY_WORKERS"));
  EXPECT_THAT(s.message(), HasSubstr("need 5 ranks"));
  EXPECT_THAT(s.message(), HasSubstr("4 ranks (started by mpirun)"));

  // The program's own counts do not fit either.
  job = Job(2, 2);
  s = ApplyLaunchShape(LaunchShape{}, Env(Launcher::kSrun, 3), &job);
  ASSERT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("job spec"));
  EXPECT_THAT(s.message(), HasSubstr("3 ranks (started by srun)"));
}

TEST(ApplyLaunchShapeTest, NoRankLeftIsAnError) {
  JobSpec job = Job(4, 0);
  Status s = ApplyLaunchShape(LaunchShape{}, Env(Launcher::kMpirun, 4), &job);
  ASSERT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("no rank for workers"));
}

TEST(ApplyLaunchShapeTest, UnknownShapeIsAnError) {
  JobSpec job = Job(0, 0);
  Status s = ApplyLaunchShape(LaunchShape{}, Env(Launcher::kMpirun, 4), &job);
  ASSERT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("FERRY_SERVERS"));
}

}  // namespace
}  // namespace ferry::ps
