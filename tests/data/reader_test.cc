// Reader over files: formats, gzip, malformed-line policy, errors, Rewind, dealt input and
// bounded memory.
#include "models/data/reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include "models/data/hashing.h"
#include "tests/data/data_test_util.h"

namespace ferry::models {
namespace {

using testing::Messages;
using testing::OpenAndReadAll;
using testing::TempDir;
using testing::WriteFile;
using testing::WriteGzip;

ReaderOptions Options(Format format, std::vector<std::string> files) {
  ReaderOptions o;
  o.format = format;
  o.files = std::move(files);
  return o;
}

TEST(Reader, LibsvmFileWithBlankAndCommentLines) {
  TempDir dir;
  WriteFile(dir.File("a.svm"), "1 1:1 2:0.5\n\n# header comment\n-1 3:2\r\n0\n+1 qid:4 7:1");
  Result<Batch> b = OpenAndReadAll(Options(Format::kLibsvm, {dir.File("a.svm")}), 2);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->labels, (std::vector<float>{1, 0, 0, 1}));
  EXPECT_EQ(b->offsets, (std::vector<uint32_t>{0, 2, 3, 3, 4}));
  EXPECT_EQ(b->ids[3], HashIndex(0, 7, 0));
}

TEST(Reader, GzipIsDetectedByMagicNotName) {
  TempDir dir;
  const std::string text = "1 1:1\n0 2:1\n1 3:1\n";
  WriteFile(dir.File("plain.gz"), text);    // misleading name, plain content
  WriteGzip(dir.File("zipped.txt"), text);  // gzip content, no .gz
  Result<Batch> a = OpenAndReadAll(Options(Format::kLibsvm, {dir.File("plain.gz")}));
  Result<Batch> b = OpenAndReadAll(Options(Format::kLibsvm, {dir.File("zipped.txt")}));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 3u);
  testing::ExpectSameBatch(*a, *b);
}

TEST(Reader, GzipWithSeveralMembersAndTinyBuffer) {
  TempDir dir;
  std::string all;
  for (int m = 0; m < 3; ++m) {
    std::string part;
    for (int i = 0; i < 200; ++i) {
      part += std::to_string(i % 2) + " " + std::to_string(m * 1000 + i) + ":1\n";
    }
    WriteGzip(dir.File("m.gz"), part, m > 0);
    all += part;
  }
  WriteFile(dir.File("m.txt"), all);
  ReaderOptions o = Options(Format::kLibsvm, {dir.File("m.gz")});
  o.buffer_bytes = 64;
  Result<Batch> a = OpenAndReadAll(o);
  Result<Batch> b = OpenAndReadAll(Options(Format::kLibsvm, {dir.File("m.txt")}));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  EXPECT_EQ(a->size(), 600u);
  testing::ExpectSameBatch(*a, *b);
}

TEST(Reader, CorruptAndTruncatedGzipAreErrorsNamingTheFile) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "1 " + std::to_string(i) + ":1\n";
  WriteGzip(dir.File("ok.gz"), text);
  const std::string gz = testing::ReadFile(dir.File("ok.gz"));
  WriteFile(dir.File("trunc.gz"), gz.substr(0, gz.size() / 2));
  std::string corrupt = gz;
  for (size_t i = 20; i < 60; ++i) corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5a);
  WriteFile(dir.File("corrupt.gz"), corrupt);
  for (const char* name : {"trunc.gz", "corrupt.gz"}) {
    auto r = Reader::Open(Options(Format::kLibsvm, {dir.File(name)}));
    ASSERT_TRUE(r.ok());
    Batch b;
    Result<size_t> n = size_t{1};
    while (n.ok() && *n > 0) n = (*r)->Next(1000, &b);
    ASSERT_FALSE(n.ok()) << name;
    EXPECT_NE(n.status().message().find(name), std::string::npos) << n.status().ToString();
    EXPECT_FALSE((*r)->Next(10, &b).ok());  // sticky
  }
}

TEST(Reader, MalformedLinesAreReportedWithFileAndLineThenCounted) {
  TempDir dir;
  std::string text;
  for (int i = 1; i <= 40; ++i) {
    text += (i % 3 == 0) ? "bad line\n" : "1 " + std::to_string(i) + ":1\n";
  }
  WriteFile(dir.File("m.svm"), text);
  Messages msgs;
  ReaderOptions o = Options(Format::kLibsvm, {dir.File("m.svm")});
  o.on_malformed = msgs.Sink();
  auto r = Reader::Open(o);
  ASSERT_TRUE(r.ok());
  const Batch b = testing::ReadAll(r->get());
  EXPECT_EQ(b.size(), 27u);
  EXPECT_EQ((*r)->stats().malformed, 13u);
  EXPECT_EQ((*r)->stats().lines, 40u);
  EXPECT_EQ((*r)->stats().samples, 27u);
  EXPECT_EQ((*r)->stats().features, 27u);
  EXPECT_EQ((*r)->stats().bytes, text.size());
  ASSERT_EQ(msgs.lines.size(), 11u);  // 10 reports and one "not reported any more" note
  EXPECT_EQ(msgs.lines[0], dir.File("m.svm") + ":3: label 'bad' is not 1, 0, +1 or -1");
  EXPECT_EQ(msgs.lines[9].substr(0, dir.File("m.svm").size() + 4), dir.File("m.svm") + ":30:");
  EXPECT_NE(msgs.lines[10].find("not reported"), std::string::npos);
  // The next pass counts again but does not repeat the reports.
  ASSERT_TRUE((*r)->Rewind().ok());
  testing::ReadAll(r->get());
  EXPECT_EQ((*r)->stats().malformed, 13u);
  EXPECT_EQ(msgs.lines.size(), 11u);
}

TEST(Reader, StrictModeStopsAtTheFirstMalformedLine) {
  TempDir dir;
  WriteFile(dir.File("s.svm"), "1 1:1\n0 2:1\n1 2:x\n0 3:1\n");
  ReaderOptions o = Options(Format::kLibsvm, {dir.File("s.svm")});
  o.strict = true;
  auto r = Reader::Open(o);
  ASSERT_TRUE(r.ok());
  Batch b;
  Result<size_t> n = (*r)->Next(100, &b);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(n.status().message(),
            dir.File("s.svm") + ":3: feature 1 '2:x': value is not a finite number");
}

TEST(Reader, LineNumbersAreFileLinesEvenInALaterShard) {
  TempDir dir;
  std::string text;
  for (int i = 1; i <= 100; ++i) text += i == 90 ? "oops\n" : "1 " + std::to_string(i) + ":1\n";
  WriteFile(dir.File("l.svm"), text);
  for (int threads : {1, 3}) {
    Messages msgs;
    ReaderOptions o = Options(Format::kLibsvm, {dir.File("l.svm")});
    o.shard = 3;
    o.num_shards = 4;
    o.threads = threads;
    o.on_malformed = msgs.Sink();
    ASSERT_TRUE(OpenAndReadAll(o).ok());
    ASSERT_EQ(msgs.lines.size(), 1u);
    EXPECT_EQ(msgs.lines[0], dir.File("l.svm") + ":90: label 'oops' is not 1, 0, +1 or -1");
  }
}

TEST(Reader, OverlongLinesAreMalformedNotBuffered) {
  TempDir dir;
  const std::string longline = "1 " + std::string(500, '7') + ":1\n";
  WriteFile(dir.File("o.svm"), "1 1:1\n" + longline + "0 2:1\n" + longline);
  Messages msgs;
  ReaderOptions o = Options(Format::kLibsvm, {dir.File("o.svm")});
  o.buffer_bytes = 128;
  o.on_malformed = msgs.Sink();
  for (int threads : {1, 2}) {
    msgs.lines.clear();
    o.threads = threads;
    auto r = Reader::Open(o);
    ASSERT_TRUE(r.ok());
    const Batch b = testing::ReadAll(r->get());
    EXPECT_EQ(b.labels, (std::vector<float>{1, 0}));
    EXPECT_EQ((*r)->stats().malformed, 2u);
    EXPECT_EQ((*r)->stats().lines, 4u);
    ASSERT_EQ(msgs.lines.size(), 2u);
    EXPECT_EQ(msgs.lines[1], dir.File("o.svm") +
                                 ":4: line longer than the read buffer (128 bytes); raise "
                                 "buffer_bytes");
  }
}

TEST(Reader, MissingUnreadableAndBadOptions) {
  TempDir dir;
  auto missing = Reader::Open(Options(Format::kLibsvm, {dir.File("nope.svm")}));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kIoError);
  EXPECT_NE(missing.status().message().find(dir.File("nope.svm")), std::string::npos);
  auto directory = Reader::Open(Options(Format::kLibsvm, {dir.File("")}));
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.status().message().find("not a regular file"), std::string::npos);
  EXPECT_FALSE(Reader::Open(Options(Format::kLibsvm, {})).ok());
  WriteFile(dir.File("x"), "1 1:1\n");
  ReaderOptions o = Options(Format::kLibsvm, {dir.File("x")});
  o.shard = 2;
  o.num_shards = 2;
  EXPECT_FALSE(Reader::Open(o).ok());
  o = Options(Format::kLibsvm, {dir.File("x")});
  o.threads = 0;
  EXPECT_FALSE(Reader::Open(o).ok());
  o.threads = 1;
  o.hash_bits = 4;
  EXPECT_FALSE(Reader::Open(o).ok());
  o.hash_bits = 0;
  o.buffer_bytes = 8;
  EXPECT_FALSE(Reader::Open(o).ok());
  o.buffer_bytes = 64;
  auto r = Reader::Open(o);
  ASSERT_TRUE(r.ok());
  Batch b;
  EXPECT_FALSE((*r)->Next(0, &b).ok());
}

TEST(Reader, RewindReplaysTheShardAndResetsStats) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 300; ++i) text += std::to_string(i % 2) + " " + std::to_string(i) + ":1\n";
  WriteFile(dir.File("r.svm"), text);
  for (int threads : {1, 2}) {
    ReaderOptions o = Options(Format::kLibsvm, {dir.File("r.svm")});
    o.threads = threads;
    o.buffer_bytes = 256;
    auto r = Reader::Open(o);
    ASSERT_TRUE(r.ok());
    const Batch first = testing::ReadAll(r->get(), 13);
    Batch b;
    EXPECT_EQ(*(*r)->Next(5, &b), 0u);  // stays at the end
    ASSERT_TRUE((*r)->Rewind().ok());
    EXPECT_EQ((*r)->stats().samples, 0u);
    // Rewind in the middle of a pass, too.
    ASSERT_EQ(*(*r)->Next(50, &b), 50u);
    ASSERT_TRUE((*r)->Rewind().ok());
    const Batch second = testing::ReadAll(r->get(), 64);
    EXPECT_EQ(first.size(), 300u);
    testing::ExpectSameBatch(first, second);
    EXPECT_EQ((*r)->stats().samples, 300u);
  }
}

TEST(Reader, CriteoAndLibffmFiles) {
  TempDir dir;
  std::string row = "1";
  for (int i = 0; i < 13; ++i) row += i == 4 ? "\t" : "\t" + std::to_string(i);
  for (int i = 0; i < 26; ++i) row += i % 5 == 0 ? "\t" : "\tdeadbeef";
  WriteGzip(dir.File("c.gz"), row + "\n" + row + "\n");
  Result<Batch> c = OpenAndReadAll(Options(Format::kCriteo, {dir.File("c.gz")}));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->size(), 2u);
  EXPECT_EQ(c->nnz(), 2u * (12 + 20));
  WriteFile(dir.File("f.ffm"), "1 0:1:1 2:9:0.5\n0 1:3:1\n");
  Result<Batch> f = OpenAndReadAll(Options(Format::kLibffm, {dir.File("f.ffm")}));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->fields, (std::vector<uint32_t>{0, 2, 1}));
}

TEST(Reader, MemoryStaysBoundedOnAFileFarLargerThanTheBuffer) {
  TempDir dir;
  // ~24 MiB of LIBSVM written in pieces, read through a 16 KiB buffer.
  {
    std::FILE* f = std::fopen(dir.File("big.svm").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::string chunk;
    for (int i = 0; i < 4096; ++i) chunk += "1 1:1 22:1 333:1 4444:1 55555:0.5 666666:1 77:1\n";
    for (int rep = 0; rep < 120; ++rep) {
      ASSERT_EQ(std::fwrite(chunk.data(), 1, chunk.size(), f), chunk.size());
    }
    std::fclose(f);
  }
  // Resident memory, sampled while reading: the reader's footprint must stay near its buffer,
  // far below the file size (reading the file into memory would add ~24 MiB).
  const auto resident_kib = [] {
    long pages = 0, resident = 0;
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    if (f) {
      if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
      std::fclose(f);
    }
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
  };
  const long before = resident_kib();
  long peak = before;
  ReaderOptions o = Options(Format::kLibsvm, {dir.File("big.svm")});
  o.buffer_bytes = 16 << 10;
  auto r = Reader::Open(o);
  ASSERT_TRUE(r.ok());
  Batch b;
  uint64_t total = 0;
  while (true) {
    b.Clear();
    Result<size_t> n = (*r)->Next(512, &b);
    ASSERT_TRUE(n.ok());
    if (*n == 0) break;
    total += *n;
    if (total % (512 * 64) == 0) peak = std::max(peak, resident_kib());
  }
  EXPECT_EQ(total, 4096u * 120);
  EXPECT_GT((*r)->stats().bytes, 20u << 20);
  EXPECT_GT(before, 0);
  EXPECT_LT(peak - before, 4 << 10) << "resident memory grew by " << peak - before << " KiB";
}

// Dealt input: items handed out one at a time, whoever asks, make every line exactly once per
// pass, plain bytes and a gzip file alike, also when a reader stops asking in the middle (it
// finishes what it took) and over a second pass after Rewind.
TEST(Reader, DealtItemsAreEveryLineOncePerPassWhoeverTakesThem) {
  TempDir dir;
  std::string a, b, c;
  for (int i = 1; i <= 400; ++i) {
    const std::string line = std::to_string(i % 2) + " " + std::to_string(i) + ":1\n";
    (i <= 150 ? a : i <= 300 ? b : c) += line;
  }
  WriteFile(dir.File("a.svm"), a);
  WriteFile(dir.File("b.svm"), b);
  WriteGzip(dir.File("c.gz"), c);
  constexpr uint32_t kItems = 13;
  std::map<uint64_t, uint64_t> next;  // pass -> next item
  std::vector<int> taken(3, 0);
  std::vector<std::unique_ptr<Reader>> readers;
  for (int r = 0; r < 3; ++r) {
    ReaderOptions o =
        Options(Format::kLibsvm, {dir.File("a.svm"), dir.File("b.svm"), dir.File("c.gz")});
    o.deal_items = kItems;
    o.deal = [&, r](uint64_t pass) -> Result<std::optional<uint64_t>> {
      // Reader 2 stops asking after its second item of the first pass.
      if ((r == 2 && pass == 0 && taken[2] == 2) || next[pass] == kItems) {
        return std::optional<uint64_t>();
      }
      ++taken[r];
      return std::optional<uint64_t>(next[pass]++);
    };
    auto opened = Reader::Open(o);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    readers.push_back(std::move(opened).value());
  }
  for (int pass = 0; pass < 2; ++pass) {
    std::map<uint64_t, int> seen;  // feature id -> times read
    std::vector<bool> done(3, false);
    Batch batch;
    for (int round = 0; !(done[0] && done[1] && done[2]); ++round) {
      const int r = round % 3;
      if (done[r]) continue;
      batch.Clear();
      Result<size_t> n = readers[r]->Next(7, &batch);
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      if (*n == 0) done[r] = true;
      for (uint64_t id : batch.ids) ++seen[id];
    }
    ASSERT_EQ(seen.size(), 400u) << "pass " << pass;
    for (int i = 1; i <= 400; ++i) {
      EXPECT_EQ(seen[HashIndex(0, static_cast<uint64_t>(i), 0)], 1) << "line " << i;
    }
    EXPECT_EQ(next[pass], kItems);
    if (pass == 0) {
      EXPECT_EQ(taken[2], 2);
      for (auto& r : readers) ASSERT_TRUE(r->Rewind().ok());
    }
  }
}

TEST(Reader, DealtInputRefusesBadOptionsAndItems) {
  TempDir dir;
  WriteFile(dir.File("d.svm"), "1 1:1\n0 2:1\n");
  ReaderOptions o = Options(Format::kLibsvm, {dir.File("d.svm")});
  o.deal = [](uint64_t) -> Result<std::optional<uint64_t>> { return std::optional<uint64_t>(5); };
  o.deal_items = 0;
  EXPECT_NE(Reader::Open(o).status().message().find("deal_items 0"), std::string::npos);
  o.deal_items = 4;
  o.threads = 2;
  EXPECT_NE(Reader::Open(o).status().message().find("threads must be 1"), std::string::npos);
  o.threads = 1;
  auto r = Reader::Open(o);
  ASSERT_TRUE(r.ok());
  Batch b;
  Result<size_t> n = (*r)->Next(4, &b);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(), "dealt item 5 of 4");
}

}  // namespace
}  // namespace ferry::models
