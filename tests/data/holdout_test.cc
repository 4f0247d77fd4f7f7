// The held-out split (ReaderOptions::holdout): the two sides partition the samples whatever the
// sharding, threads and compression; the split follows the documented hash of the line bytes;
// malformed lines belong to one side only; CRLF splits like LF.
#include "models/data/holdout.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "models/data/hashing.h"
#include "models/data/reader.h"
#include "tests/data/data_test_util.h"

namespace ferry::models {
namespace {

using Keep = Holdout::Keep;
using testing::Messages;
using testing::TempDir;
using testing::WriteFile;
using testing::WriteGzip;

// The documented rule, computed here independently of the library.
bool ExpectHeldOut(const std::string& line_without_eol, double fraction, uint64_t seed) {
  const uint64_t h = XXH3_64bits_withSeed(line_without_eol.data(), line_without_eol.size(), seed);
  return std::ldexp(static_cast<double>(h >> 11), -53) < fraction;
}

// Sample line k: label k % 2, first feature index k (how a sample is recognised), sometimes a
// second feature to vary the bytes.
std::string SampleLine(uint64_t k) {
  std::string line = std::to_string(k % 2) + " " + std::to_string(k) + ":1";
  if (k % 5 == 0) line += " 99:0.25";
  return line;
}

// Writes lines [first, first + count) with `eol`, a blank line after every 13th.
std::string Text(uint64_t first, uint64_t count, const std::string& eol, bool final_eol = true) {
  std::string text;
  for (uint64_t k = first; k < first + count; ++k) {
    text += SampleLine(k);
    if (k + 1 < first + count || final_eol) text += eol;
    if (k % 13 == 0) text += eol;
  }
  return text;
}

struct Side {
  std::vector<uint64_t> lines;  // first feature index of every sample, in order
  ReaderStats stats;
};

// Everything a reader with these options yields, as sample line numbers.
Side ReadSide(ReaderOptions o, uint64_t max_line) {
  Side side;
  auto r = Reader::Open(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return side;
  const Batch b = testing::ReadAll(r->get(), 11);
  std::map<uint64_t, uint64_t> by_id;
  for (uint64_t k = 0; k <= max_line; ++k) by_id[HashIndex(0, k, o.hash_seed)] = k;
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_LT(b.offsets[i], b.offsets[i + 1]);
    if (b.offsets[i] < b.offsets[i + 1]) side.lines.push_back(by_id.at(b.ids[b.offsets[i]]));
  }
  side.stats = (*r)->stats();
  return side;
}

TEST(Holdout, LineHashIsXxh3OfTheLineWithoutCr) {
  for (const std::string& line :
       std::vector<std::string>{"", "1 2:1", "0 7:0.5 9:1", std::string(300, 'x')}) {
    EXPECT_EQ(LineHash(line, 42), XXH3_64bits_withSeed(line.data(), line.size(), 42)) << line;
    EXPECT_EQ(LineHash(line + "\r", 42), LineHash(line, 42));
  }
  EXPECT_NE(LineHash("1 2:1", 1), LineHash("1 2:1", 2));
  // Only one trailing '\r' is the line end's; a '\r' inside stays part of the bytes.
  EXPECT_NE(LineHash("1 2:1\r\r", 0), LineHash("1 2:1", 0));
  EXPECT_FALSE(IsHeldOutHash(0, 0.0));  // fraction 0 holds out nothing, not even point 0
  EXPECT_TRUE(IsHeldOutHash(0, 1e-9));
  EXPECT_FALSE(IsHeldOutHash(std::numeric_limits<uint64_t>::max(), 0.999999));
}

TEST(Holdout, StreamingHashMatchesTheOneShotHashForRandomCuts) {
  std::mt19937_64 rng(5);
  StreamingLineHash s;
  for (const std::string& line :
       std::vector<std::string>{"1 2:1\r", "a\r\rb\r", "\r", "", std::string(400, 'q') + "\r"}) {
    for (size_t trial = 0; trial < 50; ++trial) {
      s.Reset(9);
      size_t at = 0;
      while (at < line.size()) {
        const size_t n = std::min(line.size() - at, size_t{1} + rng() % 5);
        s.Update(std::string_view(line).substr(at, n));
        at += n;
      }
      ASSERT_EQ(s.Finish(), LineHash(line, 9)) << "line " << line.size() << " bytes";
    }
  }
}

TEST(Holdout, BadFractionIsAnErrorAtOpen) {
  TempDir dir;
  WriteFile(dir.File("x.svm"), "1 1:1\n");
  ReaderOptions o;
  o.files = {dir.File("x.svm")};
  for (double bad : {-0.1, 1.0, 1.5, std::nan(""), std::numeric_limits<double>::infinity()}) {
    o.holdout.fraction = bad;
    auto r = Reader::Open(o);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("holdout fraction"), std::string::npos)
        << r.status().ToString();
  }
  for (double good : {0.0, 0.5, 0.999}) {
    o.holdout.fraction = good;
    EXPECT_TRUE(Reader::Open(o).ok()) << good;
  }
}

TEST(Holdout, FractionZeroIsNoSplit) {
  TempDir dir;
  WriteFile(dir.File("z.svm"), Text(1, 100, "\n"));
  ReaderOptions o;
  o.files = {dir.File("z.svm")};
  o.holdout.seed = 3;
  const Side all = ReadSide(o, 100);
  EXPECT_EQ(all.lines.size(), 100u);
  EXPECT_EQ(all.stats.skipped_other_side, 0u);
  o.holdout.keep = Keep::kHeldOut;
  const Side none = ReadSide(o, 100);
  EXPECT_TRUE(none.lines.empty());
  EXPECT_EQ(none.stats.skipped_other_side, 100u);  // blank lines stay blank
  EXPECT_EQ(none.stats.lines, all.stats.lines);
}

// The sides over all shards are every sample exactly once, each on the side the hash says,
// for 1..4 shards, 1 and 3 threads, plain LF, plain CRLF and gzip files.
TEST(Holdout, SidesPartitionTheSamplesForAnyShardingThreadsAndGzip) {
  TempDir dir;
  const std::vector<std::string> files = {dir.File("a.svm"), dir.File("b.svm"), dir.File("c.gz"),
                                          dir.File("d.gz")};
  WriteFile(files[0], Text(1, 500, "\n"));
  WriteFile(files[1], Text(501, 300, "\r\n", false));
  WriteGzip(files[2], Text(801, 300, "\n"));
  WriteGzip(files[3], Text(1101, 200, "\r\n"));
  const uint64_t total = 1300;
  constexpr double kFraction = 0.3;
  constexpr uint64_t kSeed = 77;
  std::vector<bool> held(total + 1);
  uint64_t expected_held = 0;
  for (uint64_t k = 1; k <= total; ++k) {
    held[k] = ExpectHeldOut(SampleLine(k), kFraction, kSeed);
    expected_held += held[k];
  }
  ASSERT_GT(expected_held, 300u);  // both sides substantial
  ASSERT_LT(expected_held, 500u);

  for (uint32_t n = 1; n <= 4; ++n) {
    std::vector<int> seen(total + 1, 0);
    for (Keep keep : {Keep::kRest, Keep::kHeldOut}) {
      uint64_t kept = 0, skipped = 0;
      for (uint32_t s = 0; s < n; ++s) {
        std::vector<uint64_t> one_thread;
        for (int threads : {1, 3}) {
          ReaderOptions o;
          o.files = files;
          o.shard = s;
          o.num_shards = n;
          o.threads = threads;
          o.buffer_bytes = 512;
          o.strict = true;
          o.holdout = {kFraction, kSeed, keep};
          const Side side = ReadSide(o, total);
          EXPECT_EQ(side.stats.samples, side.lines.size());
          EXPECT_EQ(side.stats.malformed, 0u);
          if (threads == 1) {
            one_thread = side.lines;
            kept += side.lines.size();
            skipped += side.stats.skipped_other_side;
            for (uint64_t k : side.lines) {
              seen[k]++;
              EXPECT_EQ(held[k], keep == Keep::kHeldOut)
                  << "line " << k << " on the wrong side, shard " << s << "/" << n;
            }
          } else {
            // The same samples in the same order as one thread.
            EXPECT_EQ(side.lines, one_thread) << "shard " << s << "/" << n;
          }
        }
      }
      const bool rest = keep == Keep::kRest;
      EXPECT_EQ(kept, rest ? total - expected_held : expected_held) << n << " shards";
      EXPECT_EQ(skipped, rest ? expected_held : total - expected_held) << n << " shards";
    }
    for (uint64_t k = 1; k <= total; ++k) {
      ASSERT_EQ(seen[k], 1) << "line " << k << ", " << n << " shards";
    }
  }
}

TEST(Holdout, FractionIsBinomialAndSeedsAreIndependent) {
  TempDir dir;
  constexpr uint64_t kLines = 20000;
  WriteFile(dir.File("big.svm"), Text(1, kLines, "\n"));
  const auto held_out = [&](uint64_t seed) {
    ReaderOptions o;
    o.files = {dir.File("big.svm")};
    o.holdout = {0.1, seed, Keep::kHeldOut};
    Side side = ReadSide(o, kLines);
    EXPECT_EQ(side.stats.samples + side.stats.skipped_other_side, kLines);
    return std::set<uint64_t>(side.lines.begin(), side.lines.end());
  };
  const std::set<uint64_t> a = held_out(1);
  const std::set<uint64_t> b = held_out(2);
  // Binomial(20000, 0.1): mean 2000, sd 42.4; these bounds are 4.7 sd out.
  EXPECT_GT(a.size(), 1800u);
  EXPECT_LT(a.size(), 2200u);
  EXPECT_GT(b.size(), 1800u);
  EXPECT_LT(b.size(), 2200u);
  // Independent seeds: the overlap is about 0.1 * 0.1 * 20000 = 200 (sd about 14).
  size_t both = 0;
  for (uint64_t k : a) both += b.count(k);
  EXPECT_GT(both, 130u);
  EXPECT_LT(both, 270u);
}

TEST(Holdout, DuplicateLinesLandOnTheSameSide) {
  TempDir dir;
  std::string text;
  for (int rep = 0; rep < 3; ++rep) text += Text(1, 200, "\n");
  WriteFile(dir.File("dup.svm"), text);
  for (int threads : {1, 3}) {
    std::map<uint64_t, int> count[2];
    for (Keep keep : {Keep::kRest, Keep::kHeldOut}) {
      ReaderOptions o;
      o.files = {dir.File("dup.svm")};
      o.threads = threads;
      o.buffer_bytes = 256;
      o.holdout = {0.5, 8, keep};
      for (uint64_t k : ReadSide(o, 200).lines) count[keep == Keep::kRest ? 0 : 1][k]++;
    }
    EXPECT_FALSE(count[0].empty());
    EXPECT_FALSE(count[1].empty());
    for (uint64_t k = 1; k <= 200; ++k) {
      const int rest = count[0].count(k) ? count[0][k] : 0;
      const int held = count[1].count(k) ? count[1][k] : 0;
      EXPECT_TRUE((rest == 3 && held == 0) || (rest == 0 && held == 3))
          << "line " << k << ": " << rest << " kept, " << held << " held out";
    }
  }
}

// Lines (malformed ones and lines too long for the buffer included) split the same in an LF
// file, its CRLF twin and the gzip of the CRLF twin.
TEST(Holdout, CrlfLinesSplitLikeLfLines) {
  TempDir dir;
  std::vector<std::string> lines;
  for (uint64_t k = 1; k <= 300; ++k) {
    if (k % 40 == 0) {
      lines.push_back("1 " + std::to_string(k) + ":1 " + std::string(200, '5') + ":1");  // long
    } else if (k % 30 == 0) {
      lines.push_back("bad " + std::to_string(k));
    } else {
      lines.push_back(SampleLine(k));
    }
  }
  std::string lf, crlf;
  for (const std::string& l : lines) {
    lf += l + "\n";
    crlf += l + "\r\n";
  }
  WriteFile(dir.File("lf.svm"), lf);
  WriteFile(dir.File("crlf.svm"), crlf);
  WriteGzip(dir.File("crlf.gz"), crlf);
  for (int threads : {1, 3}) {
    for (Keep keep : {Keep::kRest, Keep::kHeldOut}) {
      std::vector<uint64_t> ref;
      std::vector<std::string> ref_reports;
      for (const char* name : {"lf.svm", "crlf.svm", "crlf.gz"}) {
        Messages msgs;
        ReaderOptions o;
        o.files = {dir.File(name)};
        o.threads = threads;
        o.buffer_bytes = 128;  // the long lines do not fit
        o.on_malformed = msgs.Sink();
        o.holdout = {0.5, 1234, keep};
        const Side side = ReadSide(o, 300);
        std::vector<std::string> reports;
        for (const std::string& m : msgs.lines) reports.push_back(m.substr(m.find(':')));
        if (ref.empty()) {
          ref = side.lines;
          ref_reports = reports;
          EXPECT_FALSE(ref.empty());
          EXPECT_FALSE(ref_reports.empty());
        } else {
          EXPECT_EQ(side.lines, ref) << name << ", " << threads << " threads";
          EXPECT_EQ(reports, ref_reports) << name << ", " << threads << " threads";
        }
      }
    }
  }
}

// A malformed line is reported, counted and (strict) fatal only on its own side; a line longer
// than the buffer too, though the reader never holds it whole.
TEST(Holdout, MalformedLinesBelongToTheSideThatKeepsThem) {
  TempDir dir;
  constexpr double kFraction = 0.5;
  constexpr uint64_t kSeed = 99;
  std::string text;
  std::vector<uint64_t> bad[2];  // file line numbers of the bad lines, per side (0: rest)
  uint64_t samples[2] = {0, 0};
  for (uint64_t k = 1; k <= 240; ++k) {
    std::string line;
    const bool is_bad = k % 20 == 0 || k % 45 == 0;
    if (k % 45 == 0) {
      line = "1 " + std::to_string(k) + ":1 " + std::string(150 + k, '7') + ":1";  // overlong
    } else if (k % 20 == 0) {
      line = "1 " + std::to_string(k) + ":oops";
    } else {
      line = SampleLine(k);
    }
    const int side = ExpectHeldOut(line, kFraction, kSeed) ? 1 : 0;
    if (is_bad) {
      bad[side].push_back(k);
    } else {
      ++samples[side];
    }
    text += line + "\n";
  }
  ASSERT_FALSE(bad[0].empty());
  ASSERT_FALSE(bad[1].empty());
  ASSERT_LE(bad[0].size(), 10u);  // all reported (the first 10 are)
  ASSERT_LE(bad[1].size(), 10u);
  WriteFile(dir.File("m.svm"), text);
  for (int threads : {1, 3}) {
    for (Keep keep : {Keep::kRest, Keep::kHeldOut}) {
      const int s = keep == Keep::kRest ? 0 : 1;
      Messages msgs;
      ReaderOptions o;
      o.files = {dir.File("m.svm")};
      o.threads = threads;
      o.buffer_bytes = 160;
      o.on_malformed = msgs.Sink();
      o.holdout = {kFraction, kSeed, keep};
      const Side side = ReadSide(o, 240);
      EXPECT_EQ(side.stats.samples, samples[s]);
      EXPECT_EQ(side.stats.malformed, bad[s].size());
      EXPECT_EQ(side.stats.skipped_other_side, samples[1 - s] + bad[1 - s].size());
      EXPECT_EQ(side.stats.lines, 240u);
      ASSERT_EQ(msgs.lines.size(), bad[s].size());
      for (size_t i = 0; i < bad[s].size(); ++i) {
        const std::string where = dir.File("m.svm") + ":" + std::to_string(bad[s][i]) + ": ";
        EXPECT_EQ(msgs.lines[i].substr(0, where.size()), where) << msgs.lines[i];
      }
      // Strict: fails at the first bad line of its own side, whatever the other side holds.
      o.strict = true;
      auto r = Reader::Open(o);
      ASSERT_TRUE(r.ok());
      Batch b;
      Result<size_t> n = size_t{1};
      while (n.ok() && *n > 0) n = (*r)->Next(7, &b);
      ASSERT_FALSE(n.ok());
      const std::string where = dir.File("m.svm") + ":" + std::to_string(bad[s][0]) + ": ";
      EXPECT_EQ(n.status().message().substr(0, where.size()), where) << n.status().ToString();
    }
  }
}

}  // namespace
}  // namespace ferry::models
