// The pure parts of the tools' command lines: tools/common (KEY=VALUE), ferry-gen's counts and
// flag resolution, ferry-launch's argv split and exit codes, ferry-train's summary line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/common/command.h"
#include "tools/common/output.h"
#include "tools/gen/cli.h"
#include "tools/launch/cli.h"
#include "tools/train/cli.h"

namespace ferry {
namespace {

TEST(ToolCommon, SplitKeyValue) {
  auto kv = tools::SplitKeyValue("--param", "UCX_TLS=shm,self");
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ(kv->first, "UCX_TLS");
  EXPECT_EQ(kv->second, "shm,self");
  auto empty_value = tools::SplitKeyValue("--env", "A=");
  ASSERT_TRUE(empty_value.ok());
  EXPECT_EQ(empty_value->second, "");
  EXPECT_EQ(tools::SplitKeyValue("--env", "=x").status().message(), "--env '=x' is not KEY=VALUE");
  EXPECT_EQ(tools::SplitKeyValue("--param", "x").status().code(), Code::kInvalidArgument);
}

TEST(ToolCommon, FiniteAndReportLine) {
  EXPECT_EQ(tools::Finite(1.5), 1.5);
  EXPECT_EQ(tools::Finite(1.0 / 0.0), 0.0);
  EXPECT_EQ(tools::ReportLine("MTU", "1024"), " MTU             : 1024\n");
}

TEST(GenCli, ParseCount) {
  EXPECT_EQ(*gen::ParseCount("--samples", "1000000"), 1000000u);
  EXPECT_EQ(*gen::ParseCount("--samples", "1e6"), 1000000u);
  EXPECT_EQ(*gen::ParseCount("--samples", "2M"), 2000000u);
  EXPECT_EQ(*gen::ParseCount("--samples", "3k"), 3000u);
  EXPECT_EQ(*gen::ParseCount("--samples", "1G"), 1000000000u);
  for (const char* bad : {"", "x", "1.5", "-1", "1X", "1MM", "1e16"}) {
    auto r = gen::ParseCount("--samples", bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_EQ(gen::ParseCount("--features", "x").status().message(),
            "--features 'x' is not a count (e.g. 1000000, 1e6 or 1M)");
}

TEST(GenCli, ResolveCriteoDefaultsAndLayoutFlags) {
  gen::GenFlags f;
  f.samples = "10K";
  f.format = "criteo";
  auto o = gen::Resolve(f);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->samples, 10000u);
  EXPECT_EQ(o->fields, models::kCriteoCatColumns);
  EXPECT_EQ(o->numeric, models::kCriteoIntColumns);
  f.fields_given = true;
  f.direct.fields = 5;
  EXPECT_EQ(gen::Resolve(f)->fields, 5u);
  f.layout = "text";
  EXPECT_EQ(gen::Resolve(f).status().code(), Code::kInvalidArgument);
  f.layout = "ctr";
  f.words_given = true;
  EXPECT_EQ(gen::Resolve(f).status().message(), "--words applies to --layout text only");
}

TEST(LaunchCli, FlagsEndAndResolve) {
  const char* argv[] = {"ferry-launch", "-s", "1", "-w", "2", "--", "prog", "--", "x"};
  EXPECT_EQ(launch::FlagsEnd(9, argv), 5);
  EXPECT_EQ(launch::FlagsEnd(5, argv), 5);
  launch::LaunchFlags f;
  f.env = {"A=1"};
  f.timeout_s = 1.5;
  auto o = launch::Resolve(f, {}, true, {"prog", "--", "x"});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->argv, (std::vector<std::string>{"prog", "--", "x"}));
  EXPECT_EQ(o->timeout.count(), 1500);
  ASSERT_EQ(o->env.size(), 1u);
  EXPECT_EQ(o->env[0].first, "A");
  // PROGRAM before the "--": the "--" is PROGRAM's own and stays.
  o = launch::Resolve(f, {"prog", "a"}, true, {"b"});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->argv, (std::vector<std::string>{"prog", "a", "--", "b"}));
  EXPECT_EQ(launch::Resolve(f, {"--bogus"}, false, {}).status().message(),
            "unknown option '--bogus'");
  EXPECT_EQ(launch::Resolve(f, {}, false, {}).status().code(), Code::kInvalidArgument);
  f.env = {"NOEQ"};
  EXPECT_EQ(launch::Resolve(f, {"prog"}, false, {}).status().message(),
            "--env 'NOEQ' is not KEY=VALUE");
}

TEST(LaunchCli, ExitCodeFor) {
  EXPECT_EQ(launch::ExitCodeFor(InvalidArgument("x")), 2);
  EXPECT_EQ(launch::ExitCodeFor(PermissionDenied("x")), 126);
  EXPECT_EQ(launch::ExitCodeFor(NotFound("x")), 127);
  EXPECT_EQ(launch::ExitCodeFor(Timeout("x")), 1);
}

TEST(TrainCli, FormatTrainSummary) {
  models::TrainReport r;
  r.samples = 1000;
  r.train_seconds = 2.0;
  r.samples_per_sec = 500;
  r.epochs = 3;
  r.kept_epoch = 2;
  EXPECT_EQ(train::FormatTrainSummary("fm", 2, 1, "tcp", r),
            "ferry-train: fm on 2 servers + 1 workers over tcp: 1000 samples in 2.0 s "
            "(500 samples/s), 3 epochs (kept epoch 2)\n");
  r.refit = true;
  r.epochs = 1;
  r.test.count = 10;
  r.test.logloss = 0.5;
  r.test.auc = 0.75;
  r.test.calibration = 1;
  r.malformed = 4;
  EXPECT_EQ(train::FormatTrainSummary("lr", 1, 1, "?", r),
            "ferry-train: lr on 1 servers + 1 workers over ?: 1000 samples in 2.0 s "
            "(500 samples/s), 1 epoch (refit: 2 on all lines); test logloss 0.50000, AUC "
            "0.75000 (10 samples), calibration 1.000; 4 malformed lines skipped\n");
  r.servers_removed = 1;
  r.test.count = 0;
  r.malformed = 0;
  EXPECT_EQ(train::FormatTrainSummary("ftrl", 3, 2, "tcp", r),
            "ferry-train: ftrl on 3 servers + 2 workers over tcp (1 server removed while "
            "training): 1000 samples in 2.0 s (500 samples/s), 1 epoch (refit: 2 on all lines)\n");
  r.servers_joined = 1;
  EXPECT_EQ(train::FormatTrainSummary("ftrl", 2, 2, "tcp", r),
            "ferry-train: ftrl on 2 servers + 2 workers over tcp (1 server joined and 1 removed "
            "while training): 1000 samples in 2.0 s (500 samples/s), 1 epoch (refit: 2 on all "
            "lines)\n");
  r.servers_removed = 0;
  EXPECT_NE(train::FormatTrainSummary("ftrl", 2, 2, "tcp", r).find("(1 server joined while "),
            std::string::npos);
  r.workers_joined = 2;
  r.workers_left = 1;
  EXPECT_NE(train::FormatTrainSummary("ftrl", 2, 2, "tcp", r)
                .find("(1 server joined; 2 workers joined and 1 left while training)"),
            std::string::npos);
  r.servers_joined = 0;
  r.workers_joined = 0;
  EXPECT_NE(train::FormatTrainSummary("ftrl", 2, 2, "tcp", r).find("(1 worker left while "),
            std::string::npos);
}

}  // namespace
}  // namespace ferry
