// Sharding (every line read by exactly one shard) and threaded parsing (the single-threaded
// output, in the same order).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "models/data/hashing.h"
#include "models/data/line_source.h"
#include "models/data/reader.h"
#include "tests/data/data_test_util.h"

namespace ferry::models {
namespace {

using testing::TempDir;
using testing::WriteFile;
using testing::WriteGzip;

TEST(PlanShard, RangesTileThePlainBytesAndGzipGoesRoundRobin) {
  std::vector<InputFile> in = {{"a", 100, false}, {"b", 0, false}, {"c", 7, true},
                               {"d", 50, false},  {"e", 9, true},  {"f", 9, true}};
  for (uint32_t n = 1; n <= 7; ++n) {
    uint64_t covered = 0;
    std::map<size_t, int> gzip_owner;
    for (uint32_t s = 0; s < n; ++s) {
      for (const Piece& p : PlanShard(in, s, n)) {
        if (in[p.file].gzip) {
          EXPECT_EQ(p.begin, 0u);
          gzip_owner[p.file]++;
          continue;
        }
        EXPECT_LT(p.begin, p.end);
        EXPECT_LE(p.end, in[p.file].size);
        covered += p.end - p.begin;
      }
    }
    EXPECT_EQ(covered, 150u) << n << " shards";
    EXPECT_EQ(gzip_owner.size(), 3u);
    for (const auto& [file, owners] : gzip_owner) EXPECT_EQ(owners, 1) << file;
  }
  // The g-th gzip file goes to shard g mod n.
  EXPECT_EQ(PlanShard(in, 1, 2).back().file, 4u);
}

// Several files of unique lines (feature index = global line number), odd shapes included: an
// empty file, a file without a final '\n', CRLF, blank lines, a long line, gzip files.
struct Corpus {
  TempDir dir;
  std::vector<std::string> files;
  uint64_t lines = 0;

  Corpus() {
    uint64_t next = 1;
    const auto make = [&](int count, const std::string& eol, bool final_newline) {
      std::string text;
      for (int i = 0; i < count; ++i) {
        std::string line = std::to_string(next % 2) + " " + std::to_string(next) + ":1";
        if (next % 17 == 0) line += " " + std::string(300, ' ') + "9:1";  // a long line
        text += line;
        if (i + 1 < count || final_newline) text += eol;
        if (next % 23 == 0) text += eol;  // a blank line
        ++next;
      }
      return text;
    };
    const auto add = [&](const std::string& name, const std::string& text, bool gzip) {
      files.push_back(dir.File(name));
      if (gzip) {
        WriteGzip(files.back(), text);
      } else {
        WriteFile(files.back(), text);
      }
    };
    add("a.svm", make(400, "\n", true), false);
    add("empty.svm", "", false);
    add("b.svm", make(3, "\n", false), false);
    add("c.svm.gz", make(150, "\n", true), true);
    add("d.svm", make(777, "\r\n", false), false);
    add("e.gz", make(90, "\n", true), true);
    add("f.svm", make(1, "\n", true), false);
    add("g.gz", make(40, "\n", false), true);
    lines = next - 1;
  }
};

// The line numbers (= first feature's id) a shard yields, in order.
std::vector<uint64_t> ShardLines(const Corpus& c, uint32_t shard, uint32_t n, int threads,
                                 size_t buffer, const Holdout& holdout = {}) {
  ReaderOptions o;
  o.holdout = holdout;
  o.files = c.files;
  o.shard = shard;
  o.num_shards = n;
  o.threads = threads;
  o.buffer_bytes = buffer;
  o.strict = true;
  Result<Batch> b = testing::OpenAndReadAll(o, 5);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  std::map<uint64_t, uint64_t> by_id;
  for (uint64_t i = 1; i <= c.lines; ++i) by_id[HashIndex(0, i, 0)] = i;
  std::vector<uint64_t> out;
  for (size_t i = 0; b.ok() && i < b->size(); ++i) out.push_back(by_id.at(b->ids[b->offsets[i]]));
  return out;
}

TEST(Sharding, EveryLineExactlyOnceForOneToSevenShards) {
  Corpus c;
  for (size_t buffer : {size_t{512}, size_t{1} << 20}) {
    for (uint32_t n = 1; n <= 7; ++n) {
      std::vector<int> seen(c.lines + 1, 0);
      for (uint32_t s = 0; s < n; ++s) {
        for (uint64_t line : ShardLines(c, s, n, 1, buffer)) seen[line]++;
      }
      for (uint64_t line = 1; line <= c.lines; ++line) {
        ASSERT_EQ(seen[line], 1) << "line " << line << " with " << n << " shards, buffer "
                                 << buffer;
      }
    }
  }
}

TEST(Sharding, ShardsAreDisjointForEveryCutPosition) {
  // A small file cut at every byte: whatever the boundary hits (the '\n', the first byte of a
  // line, the middle of one), the two shards split the lines exactly.
  TempDir dir;
  const std::string text = "1 1:1\n0 2:1\n\n1 3:1\r\n0 4:1";
  WriteFile(dir.File("t.svm"), text);
  std::vector<InputFile> in = {{dir.File("t.svm"), text.size(), false}};
  for (uint32_t n = 1; n <= static_cast<uint32_t>(text.size()) + 2; ++n) {
    std::vector<int> seen(5, 0);
    for (uint32_t s = 0; s < n; ++s) {
      ReaderOptions o;
      o.files = {dir.File("t.svm")};
      o.shard = s;
      o.num_shards = n;
      Result<Batch> b = testing::OpenAndReadAll(o);
      ASSERT_TRUE(b.ok());
      for (size_t i = 0; i < b->size(); ++i) {
        for (uint64_t k = 1; k <= 4; ++k) {
          if (b->ids[b->offsets[i]] == HashIndex(0, k, 0)) seen[k]++;
        }
      }
    }
    EXPECT_EQ(seen, (std::vector<int>{0, 1, 1, 1, 1})) << n << " shards";
  }
}

TEST(Threads, SameSamplesInTheSameOrderAsOneThread) {
  Corpus c;
  // No split, and both sides of a held-out split.
  const Holdout holdouts[] = {
      {}, {0.3, 5, Holdout::Keep::kRest}, {0.3, 5, Holdout::Keep::kHeldOut}};
  for (const Holdout& h : holdouts) {
    for (size_t buffer : {size_t{512}, size_t{64} << 10}) {
      for (uint32_t n : {1u, 3u}) {
        for (uint32_t s = 0; s < n; ++s) {
          const std::vector<uint64_t> one = ShardLines(c, s, n, 1, buffer, h);
          for (int threads : {2, 3, 5}) {
            EXPECT_EQ(ShardLines(c, s, n, threads, buffer, h), one)
                << threads << " threads, shard " << s << "/" << n << ", buffer " << buffer
                << ", holdout " << h.fraction
                << (h.keep == Holdout::Keep::kRest ? " rest" : " held");
          }
        }
      }
    }
  }
}

TEST(Threads, SameBatchesStatsAndReportsAsOneThread) {
  TempDir dir;
  std::string text;
  for (int i = 1; i <= 3000; ++i) {
    text += i % 101 == 0 ? "x\n" : std::to_string(i % 2) + " " + std::to_string(i) + ":0.5 7:1\n";
  }
  WriteGzip(dir.File("t.gz"), text);
  WriteFile(dir.File("t.svm"), text);
  struct Run {
    Batch all;
    ReaderStats stats;
    std::vector<std::string> reports;
    std::vector<size_t> sizes;
  };
  const auto run = [&](int threads, const Holdout& holdout) {
    Run out;
    testing::Messages msgs;
    ReaderOptions o;
    o.files = {dir.File("t.gz"), dir.File("t.svm")};
    o.threads = threads;
    o.holdout = holdout;
    o.buffer_bytes = 4096;
    o.on_malformed = msgs.Sink();
    auto r = Reader::Open(o);
    EXPECT_TRUE(r.ok());
    Batch b;
    while (true) {
      b.Clear();
      Result<size_t> n = (*r)->Next(97, &b);
      EXPECT_TRUE(n.ok());
      if (!n.ok() || *n == 0) break;
      out.sizes.push_back(*n);
      EXPECT_TRUE(out.all.Append(b, 0, b.size()).ok());
    }
    out.stats = (*r)->stats();
    out.reports = msgs.lines;
    return out;
  };
  const Holdout holdouts[] = {
      {}, {0.2, 1, Holdout::Keep::kRest}, {0.2, 1, Holdout::Keep::kHeldOut}};
  uint64_t samples_over_sides = 0;
  for (const Holdout& h : holdouts) {
    const Run one = run(1, h);
    if (!h.Filters()) {
      EXPECT_EQ(one.all.size(), 2u * (3000 - 29));
      EXPECT_EQ(one.stats.skipped_other_side, 0u);
    } else {
      EXPECT_GT(one.stats.skipped_other_side, 0u);
      samples_over_sides += one.all.size();
    }
    for (int threads : {2, 4}) {
      const Run many = run(threads, h);
      testing::ExpectSameBatch(one.all, many.all);
      EXPECT_EQ(one.sizes, many.sizes);
      EXPECT_EQ(one.reports, many.reports);
      EXPECT_EQ(one.stats.lines, many.stats.lines);
      EXPECT_EQ(one.stats.samples, many.stats.samples);
      EXPECT_EQ(one.stats.malformed, many.stats.malformed);
      EXPECT_EQ(one.stats.features, many.stats.features);
      EXPECT_EQ(one.stats.bytes, many.stats.bytes);
      EXPECT_EQ(one.stats.skipped_other_side, many.stats.skipped_other_side);
    }
  }
  EXPECT_EQ(samples_over_sides, 2u * (3000 - 29));
}

TEST(Threads, StrictErrorIsTheSameAsOneThread) {
  TempDir dir;
  std::string text;
  for (int i = 1; i <= 2000; ++i) text += i == 1234 ? "1 5:z\n" : "1 " + std::to_string(i) + ":1\n";
  WriteFile(dir.File("s.svm"), text);
  std::string first;
  for (int threads : {1, 2, 3}) {
    ReaderOptions o;
    o.files = {dir.File("s.svm")};
    o.threads = threads;
    o.strict = true;
    o.buffer_bytes = 1024;
    auto r = Reader::Open(o);
    ASSERT_TRUE(r.ok());
    Batch b;
    uint64_t samples = 0;
    Result<size_t> n = size_t{1};
    while (n.ok() && *n > 0) {
      n = (*r)->Next(10, &b);
      if (n.ok()) samples += *n;
    }
    ASSERT_FALSE(n.ok());
    EXPECT_EQ(samples, 1230u);  // full batches of 10 before the bad line's batch
    if (threads == 1) first = n.status().message();
    EXPECT_EQ(n.status().message(), first);
    EXPECT_NE(first.find("s.svm:1234: "), std::string::npos) << first;
  }
}

TEST(Reader, DescribeShardSaysGzipIsWhole) {
  Corpus c;
  ReaderOptions o;
  o.files = c.files;
  o.shard = 0;
  o.num_shards = 2;
  auto r = Reader::Open(o);
  ASSERT_TRUE(r.ok());
  const std::string d = (*r)->DescribeShard();
  EXPECT_NE(d.find("c.svm.gz (gzip, whole file)"), std::string::npos) << d;
  EXPECT_NE(d.find("a.svm bytes [0, "), std::string::npos) << d;
}

// Only gzip files leave a shard without input: one per shard at most, each read whole.
TEST(ShardsWithoutInput, AreTheShardsBeyondTheGzipFilesWhenThereIsNoPlainByte) {
  TempDir dir;
  WriteGzip(dir.File("x.gz"), "1 1:1\n0 2:1\n");
  WriteGzip(dir.File("y.gz"), "1 1:1\n");
  WriteFile(dir.File("p.svm"), "1 1:1\n");
  auto idle = ShardsWithoutInput({dir.File("x.gz")}, 4);
  ASSERT_TRUE(idle.ok()) << idle.status().ToString();
  EXPECT_EQ(*idle, (std::vector<uint32_t>{1, 2, 3}));
  idle = ShardsWithoutInput({dir.File("x.gz"), dir.File("y.gz")}, 3);
  ASSERT_TRUE(idle.ok());
  EXPECT_EQ(*idle, (std::vector<uint32_t>{2}));
  idle = ShardsWithoutInput({dir.File("x.gz"), dir.File("y.gz")}, 2);
  ASSERT_TRUE(idle.ok());
  EXPECT_TRUE(idle->empty());
  // Plain bytes reach every shard.
  idle = ShardsWithoutInput({dir.File("x.gz"), dir.File("p.svm")}, 4);
  ASSERT_TRUE(idle.ok());
  EXPECT_TRUE(idle->empty());
  EXPECT_FALSE(ShardsWithoutInput({dir.File("missing.gz")}, 2).ok());
}

// What a pass of no sample read, said in the error.
TEST(NoSampleError, SaysWhatTheFilesHeld) {
  ReaderStats s;
  EXPECT_EQ(NoSampleError("sample", {"a"}, s, "").message(), "no sample in a: the file is empty");
  s.lines = 2;
  s.skipped_other_side = 2;
  EXPECT_EQ(NoSampleError("sample", {"a"}, s, "").message(),
            "no sample in a: 2 lines, all on the other side of the held-out split");
  s.skipped_other_side = 0;
  s.lines = 3;
  s.malformed = 3;
  EXPECT_EQ(NoSampleError("training sample", {"a", "b"}, s, "a:1: label 'x'").message(),
            "no training sample in a, b: 3 lines, all malformed (the first: a:1: label 'x')");
  s.malformed = 1;
  EXPECT_EQ(NoSampleError("sample", {"a"}, s, "a:2: bad").message(),
            "no sample in a: 3 lines, 1 malformed, the others blank or comments (the first: a:2: "
            "bad)");
  s.malformed = 0;
  EXPECT_EQ(NoSampleError("sample", {"a", "b", "c", "d"}, s, "").code(), Code::kInvalidArgument);
  EXPECT_EQ(NoSampleError("sample", {"a", "b", "c", "d"}, s, "").message(),
            "no sample in a, b, c, ... (4 files): 3 lines, all blank or comments");
}

}  // namespace
}  // namespace ferry::models
