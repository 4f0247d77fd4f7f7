#include "models/eval/progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>

namespace ferry::models {
namespace {

struct FakeClock {
  double now = 100.0;
  ProgressDisplay::Clock Get() {
    return [this] { return now; };
  }
};

TEST(Progress, TtyRedrawsInPlaceThrottledToTenPerSecond) {
  std::ostringstream out;
  FakeClock clock;
  ProgressOptions o;
  o.tty = true;
  o.total_samples = 10000;
  ProgressDisplay p(out, o, clock.Get());
  int draws = 0;
  ProgressState s;
  for (int i = 1; i <= 200; ++i) {  // 2 seconds in 10 ms steps, 40 samples per step
    clock.now = 100.0 + 0.01 * i;
    s.samples = 40u * i;
    s.train_logloss = 0.5;
    if (p.Update(s)) ++draws;
  }
  EXPECT_GE(draws, 18);
  EXPECT_LE(draws, 21);
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), draws);
  EXPECT_EQ(text.find('\n'), std::string::npos) << "a TTY bar never scrolls";
  EXPECT_NEAR(p.rate(), 4000.0, 1.0);
  // The last draw: bar, percentage, rate, loss, ETA = (10000 - 8000) / 4000 s.
  const std::string last = text.substr(text.rfind('\r') + 1);
  EXPECT_NE(last.find("[#"), std::string::npos) << last;
  EXPECT_NE(last.find("4.0k samples/s"), std::string::npos) << last;
  EXPECT_NE(last.find("loss 0.5000"), std::string::npos) << last;
  EXPECT_NE(last.find("ETA "), std::string::npos) << last;
  EXPECT_EQ(last.find("auc"), std::string::npos) << "no AUC yet";

  // Print erases the bar and writes a full line; Finish ends the line.
  p.Print("eval: auc 0.78");
  s.last_auc = 0.78;
  clock.now += 0.01;
  EXPECT_TRUE(p.Update(s)) << "redrawn right after a printed line";
  p.Finish(s);
  const std::string all = out.str();
  EXPECT_NE(all.find("eval: auc 0.78\n"), std::string::npos);
  EXPECT_EQ(all.back(), '\n');
  EXPECT_NE(all.find("auc 0.7800"), std::string::npos);
}

TEST(Progress, PlainLinesEveryIntervalWithoutCarriageReturns) {
  std::ostringstream out;
  FakeClock clock;
  ProgressOptions o;
  o.tty = false;
  o.plain_interval_s = 5.0;
  ProgressDisplay p(out, o, clock.Get());  // total unknown: no ETA, no percentage
  ProgressState s;
  int draws = 0;
  for (int i = 1; i <= 120; ++i) {  // 12 s in 0.1 s steps
    clock.now = 100.0 + 0.1 * i;
    s.samples = 100u * i;
    if (p.Update(s)) ++draws;
  }
  EXPECT_EQ(draws, 2);  // at 5 s and 10 s
  p.Finish(s);
  const std::string text = out.str();
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);
  EXPECT_NE(text.find("progress: 5000 samples, 1000 samples/s"), std::string::npos) << text;
  EXPECT_EQ(text.find("ETA"), std::string::npos);
  EXPECT_NE(text.find("elapsed 12s"), std::string::npos) << text;
}

TEST(Progress, HumanFormats) {
  EXPECT_EQ(HumanCount(999), "999");
  EXPECT_EQ(HumanCount(12345), "12.3k");
  EXPECT_EQ(HumanCount(1234567), "1.23M");
  EXPECT_EQ(HumanCount(4.56e9), "4.56G");
  EXPECT_EQ(HumanDuration(12.4), "12s");
  EXPECT_EQ(HumanDuration(245), "4m05s");
  EXPECT_EQ(HumanDuration(3723), "1h02m03s");
  EXPECT_EQ(HumanDuration(-1), "?");
}

}  // namespace
}  // namespace ferry::models
