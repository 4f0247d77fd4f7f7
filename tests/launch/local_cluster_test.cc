// ps/launch/local_cluster.h: the pure pieces (line tagging, role and exit descriptions) and
// RunLocalCluster's return values with /bin/sh as the rank program. ferry-launch's signal,
// timeout and output behaviour is tested end to end by ferry-launch-test.sh.
#include "ps/launch/local_cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

namespace ferry::ps {
namespace {

using ::testing::HasSubstr;

std::string FeedAll(LinePrefixer& p, std::initializer_list<std::string_view> chunks) {
  std::string out;
  for (std::string_view c : chunks) p.Feed(c, &out);
  p.Finish(&out);
  return out;
}

TEST(LinePrefixerTest, PrefixesEveryLine) {
  LinePrefixer p("[rank 1] ");
  EXPECT_EQ(FeedAll(p, {"a\nbb\n\nc\n"}), "[rank 1] a\n[rank 1] bb\n[rank 1] \n[rank 1] c\n");
}

TEST(LinePrefixerTest, KeepsPartialLinesAcrossChunks) {
  LinePrefixer p("> ");
  std::string out;
  p.Feed("hel", &out);
  EXPECT_EQ(out, "");
  p.Feed("lo\nwor", &out);
  EXPECT_EQ(out, "> hello\n");
  p.Feed("ld\n", &out);
  EXPECT_EQ(out, "> hello\n> world\n");
}

TEST(LinePrefixerTest, FinishFlushesTheUnterminatedLine) {
  LinePrefixer p("> ");
  EXPECT_EQ(FeedAll(p, {"a\nlast words"}), "> a\n> last words\n");
  LinePrefixer q("> ");
  EXPECT_EQ(FeedAll(q, {"a\n"}), "> a\n");  // nothing more at EOF
  LinePrefixer empty("> ");
  EXPECT_EQ(FeedAll(empty, {}), "");
}

TEST(LinePrefixerTest, LongLinesAreCutTheSameWayHoweverChunked) {
  const std::string line(10, 'x');
  const std::string want = "> xxxx\n> xxxx\n> xx\n> y\n";
  LinePrefixer whole("> ", 4);
  EXPECT_EQ(FeedAll(whole, {line + "\ny\n"}), want);
  LinePrefixer bytes("> ", 4);
  std::string out;
  for (char c : line + "\ny\n") bytes.Feed(std::string_view(&c, 1), &out);
  bytes.Finish(&out);
  EXPECT_EQ(out, want);
  LinePrefixer exact("> ", 4);
  EXPECT_EQ(FeedAll(exact, {"xxxx", "\n"}), "> xxxx\n");  // no empty piece
}

TEST(LocalClusterTextTest, Roles) {
  JobSpec job;
  job.servers = 2;
  job.workers = 3;
  EXPECT_EQ(RolesText(RolesOf(job, 1, 5).value()), "server 1");
  EXPECT_EQ(RolesText(RolesOf(job, 3, 5).value()), "worker 1");
  job.role_rule = RoleRule::kColocated;
  EXPECT_EQ(RolesText(RolesOf(job, 1, 3).value()), "server 1, worker 1");
  EXPECT_EQ(RolesText(RolesOf(job, 2, 3).value()), "worker 2");
}

TEST(LocalClusterTextTest, WaitStatuses) {
  EXPECT_EQ(DescribeWaitStatus(W_EXITCODE(2, 0)), "exited with status 2");
  EXPECT_EQ(ExitCodeOf(W_EXITCODE(2, 0)), 2);
  EXPECT_EQ(DescribeWaitStatus(W_EXITCODE(0, SIGKILL)), "was killed by signal 9 (SIGKILL)");
  EXPECT_EQ(ExitCodeOf(W_EXITCODE(0, SIGKILL)), 137);
  EXPECT_EQ(DescribeWaitStatus(W_EXITCODE(0, SIGSEGV) | WCOREFLAG),
            "was killed by signal 11 (SIGSEGV), core dumped");
}

// A rank program in sh: rank 0 publishes a (fake) coordinator address the way
// ps/launch/rendezvous.cc does, then every rank exits with the code `codes` gives it ("0 0 7": rank
// 2 exits 7).
LocalClusterOptions ShJob(uint32_t servers, uint32_t workers, const std::string& codes) {
  LocalClusterOptions o;
  o.servers = servers;
  o.workers = workers;
  o.kill_grace = Millis(2000);
  o.timeout = Millis(30000);
  const std::string publish =
      "if [ \"$FERRY_RANK\" = 0 ]; then echo 127.0.0.1:1 > \"$FERRY_COORDINATOR_FILE.tmp\" && "
      "mv \"$FERRY_COORDINATOR_FILE.tmp\" \"$FERRY_COORDINATOR_FILE\"; fi; ";
  o.argv = {"sh", "-c", publish + "set -- " + codes + "; shift $FERRY_RANK; exit $1"};
  return o;
}

TEST(RunLocalClusterTest, EveryRankSucceeds) {
  auto code = RunLocalCluster(ShJob(2, 2, "0 0 0 0"));
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  EXPECT_EQ(*code, 0);
}

TEST(RunLocalClusterTest, TheFailingRanksStatusIsTheExitCode) {
  auto code = RunLocalCluster(ShJob(1, 2, "0 0 7"));
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  EXPECT_EQ(*code, 7);
}

// Join slots: the job's launch starts every rank but them (and names its coordinator); a launch
// with `join` starts that slot's rank alone, with the size of the whole job.
TEST(RunLocalClusterTest, JoinSlotsStartOnlyWhenAskedTo) {
  LocalClusterOptions o = ShJob(1, 1, "0 0 9");  // rank 2, the join slot, would exit 9
  o.join_slots = 1;
  auto code = RunLocalCluster(o);
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  EXPECT_EQ(*code, 0) << "the join slot's rank started with the job";
  o.join = 0;
  o.env = {{"FERRY_COORDINATOR", "127.0.0.1:1"}};
  code = RunLocalCluster(o);
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  EXPECT_EQ(*code, 9) << "join slot 0 is rank 2 of 3";
  o.env.clear();
  ::unsetenv("FERRY_COORDINATOR");
  EXPECT_THAT(RunLocalCluster(o).status().message(), HasSubstr("FERRY_COORDINATOR"));
  o.join = 1;
  o.env = {{"FERRY_COORDINATOR", "127.0.0.1:1"}};
  EXPECT_THAT(RunLocalCluster(o).status().message(), HasSubstr("join slot 1 is out of range"));
  JobSpec job;
  job.servers = 1;
  job.workers = 1;
  job.join_slots = 1;
  EXPECT_EQ(RolesText(RolesOf(job, 2, 3).value()), "join slot 0");
}

// Worker join slots are the last ranks, after the server join slots.
TEST(RunLocalClusterTest, WorkerJoinSlotsStartOnlyWhenAskedTo) {
  LocalClusterOptions o = ShJob(1, 1, "0 0 8 9");  // rank 2 a server join slot, 3 a worker's
  o.join_slots = 1;
  o.worker_join_slots = 1;
  auto code = RunLocalCluster(o);
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  EXPECT_EQ(*code, 0) << "a join slot's rank started with the job";
  o.join_worker = 0;
  o.env = {{"FERRY_COORDINATOR", "127.0.0.1:1"}};
  code = RunLocalCluster(o);
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  EXPECT_EQ(*code, 9) << "worker join slot 0 is rank 3 of 4";
  o.join = 0;
  EXPECT_THAT(RunLocalCluster(o).status().message(), HasSubstr("not both"));
  o.join = -1;
  o.join_worker = 1;
  EXPECT_THAT(RunLocalCluster(o).status().message(),
              HasSubstr("worker join slot 1 is out of range"));
  JobSpec job;
  job.servers = 1;
  job.workers = 1;
  job.worker_join_slots = 1;
  EXPECT_EQ(RolesText(RolesOf(job, 2, 3).value()), "worker 1 (join slot)");
}

TEST(RunLocalClusterTest, BadOptionsAreErrorsBeforeAnythingStarts) {
  LocalClusterOptions o = ShJob(1, 1, "0 0");
  o.argv.clear();
  EXPECT_EQ(RunLocalCluster(o).status().code(), Code::kInvalidArgument);

  o = ShJob(0, 1, "0");
  EXPECT_EQ(RunLocalCluster(o).status().code(), Code::kInvalidArgument);

  o = ShJob(1, 1, "0 0");
  o.transport = "pigeon";
  EXPECT_THAT(RunLocalCluster(o).status().message(), HasSubstr("pigeon"));

  o = ShJob(1, 1, "0 0");
  o.env = {{"FERRY_SIZE", "9"}};
  auto r = RunLocalCluster(o);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("FERRY_SIZE"));

  o = ShJob(1, 1, "0 0");
  o.argv[0] = "ferry-surely-not-a-program";
  r = RunLocalCluster(o);
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("not found in PATH"));
}

}  // namespace
}  // namespace ferry::ps
