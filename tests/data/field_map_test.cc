// FieldMap: the map file (ranges, singles, comments, errors naming the line), Lookup against a
// linear scan, and LIBSVM parsing and reading with a map.
#include "models/data/field_map.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "models/data/hashing.h"
#include "models/data/parse.h"
#include "models/data/reader.h"
#include "tests/data/data_test_util.h"

namespace ferry::models {
namespace {

using testing::TempDir;
using testing::WriteFile;

FieldMap ParseOk(std::string_view text) {
  Result<FieldMap> m = FieldMap::Parse(text);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(*m) : FieldMap();
}

std::string ParseError(std::string_view text) {
  Result<FieldMap> m = FieldMap::Parse(text);
  EXPECT_FALSE(m.ok()) << "accepted: " << text;
  if (m.ok()) return "";
  EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
  return m.status().message();
}

TEST(FieldMap, RangesSinglesCommentsAndBlankLines) {
  const FieldMap m = ParseOk(
      "# LIBSVM index -> field\n"
      "\n"
      "100-200 5\n"  // out of order: sorted on load
      "1-10 0\r\n"   // CRLF
      "11\t1\n"      // a single index, tab separated
      "  12-12  2   # trailing comment\n"
      "   \n"
      "18446744073709551610-18446744073709551615 3");  // up to 2^64 - 1, no final newline
  EXPECT_EQ(m.num_ranges(), 5u);
  EXPECT_EQ(m.num_fields(), 6u);
  EXPECT_EQ(m.Lookup(0), std::nullopt);
  EXPECT_EQ(m.Lookup(1), 0u);
  EXPECT_EQ(m.Lookup(10), 0u);
  EXPECT_EQ(m.Lookup(11), 1u);
  EXPECT_EQ(m.Lookup(12), 2u);
  EXPECT_EQ(m.Lookup(13), std::nullopt);
  EXPECT_EQ(m.Lookup(99), std::nullopt);
  EXPECT_EQ(m.Lookup(100), 5u);
  EXPECT_EQ(m.Lookup(200), 5u);
  EXPECT_EQ(m.Lookup(201), std::nullopt);
  EXPECT_EQ(m.Lookup(18446744073709551609ull), std::nullopt);
  EXPECT_EQ(m.Lookup(18446744073709551615ull), 3u);
  EXPECT_EQ(ParseOk("0 1048575\n").num_fields(), 1048576u);  // the largest field
}

TEST(FieldMap, OverlapsAreErrorsNamingBothLines) {
  EXPECT_EQ(ParseError("1-10 0\n5-20 1\n"),
            "field map line 2: feature indices 5-20 overlap 1-10 of line 1");
  // The later line is named even when its range sorts first.
  EXPECT_EQ(ParseError("# c\n10-20 0\n5-10 1\n"),
            "field map line 3: feature indices 5-10 overlap 10-20 of line 2");
  EXPECT_EQ(ParseError("3 0\n3 1\n"), "field map line 2: feature indices 3 overlap 3 of line 1");
  // Contained, not adjacent once sorted.
  EXPECT_NE(ParseError("0-100 0\n50-60 1\n5 2\n").find("overlap"), std::string::npos);
  ParseOk("1-10 0\n11-20 0\n");  // touching is fine
}

TEST(FieldMap, BadLinesAreErrorsNamingTheLine) {
  const struct {
    const char* text;
    const char* message;
  } cases[] = {
      {"x 1", "field map line 1: feature index range 'x' is not INDEX or FIRST-LAST"},
      {"1 0\n1-x 1", "field map line 2: feature index range '1-x' is not INDEX or FIRST-LAST"},
      {"-5 1", "field map line 1: feature index range '-5' is not"},
      {"1- 2", "field map line 1: feature index range '1-' is not"},
      {"1--2 3", "field map line 1: feature index range '1--2' is not"},
      {"99999999999999999999 1", "field map line 1: feature index range '999"},
      {"5-3 1", "field map line 1: feature index range '5-3' is empty (FIRST > LAST)"},
      {"1 1048576", "field map line 1: field '1048576' is not an integer in 0..1048575"},
      {"1 -1", "field map line 1: field '-1' is not an integer"},
      {"1 x", "field map line 1: field 'x' is not an integer"},
      {"\n\n1", "field map line 3: expected 'FIRST-LAST FIELD' or 'INDEX FIELD', got '1'"},
      {"1 2 3", "field map line 1: expected 'FIRST-LAST FIELD' or 'INDEX FIELD', got '1 2 3'"},
  };
  for (const auto& c : cases) {
    const std::string m = ParseError(c.text);
    EXPECT_EQ(m.substr(0, std::string(c.message).size()), c.message) << c.text << " -> " << m;
  }
  EXPECT_NE(ParseError("").find("maps no feature indices"), std::string::npos);
  EXPECT_NE(ParseError("# only comments\n\n  # and blanks\n").find("maps no feature indices"),
            std::string::npos);
}

TEST(FieldMap, LoadNamesTheFile) {
  TempDir dir;
  WriteFile(dir.File("ok.map"), "1-3 0\n4 1\n");
  Result<FieldMap> m = FieldMap::Load(dir.File("ok.map"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->Lookup(4), 1u);
  WriteFile(dir.File("bad.map"), "1-3 0\n\n4 x\n");
  Result<FieldMap> bad = FieldMap::Load(dir.File("bad.map"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().substr(0, dir.File("bad.map").size() + 4),
            dir.File("bad.map") + ":3: ");
  Result<FieldMap> missing = FieldMap::Load(dir.File("nope.map"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kIoError);
  EXPECT_NE(missing.status().message().find(dir.File("nope.map")), std::string::npos);
}

TEST(FieldMap, LookupAgreesWithALinearScan) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    struct R {
      uint64_t first, last;
      uint32_t field;
    };
    std::vector<R> ranges;
    std::string text;
    uint64_t next = rng() % 5;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const uint64_t first = next + rng() % 4;  // sometimes a gap, sometimes touching
      const uint64_t last = first + rng() % 6;
      ranges.push_back({first, last, static_cast<uint32_t>(rng() % 7)});
      next = last + 1;
    }
    std::shuffle(ranges.begin(), ranges.end(), rng);
    for (const R& r : ranges) {
      text += std::to_string(r.first) + "-" + std::to_string(r.last) + " " +
              std::to_string(r.field) + "\n";
    }
    const FieldMap m = ParseOk(text);
    ASSERT_EQ(m.num_ranges(), ranges.size());
    for (uint64_t idx = 0; idx <= next + 2; ++idx) {
      std::optional<uint32_t> want;
      for (const R& r : ranges) {
        if (r.first <= idx && idx <= r.last) want = r.field;
      }
      ASSERT_EQ(m.Lookup(idx), want) << "index " << idx << " in\n" << text;
    }
    // Encode reads back to the same map (a model file carries it to ferry-predict).
    const FieldMap back = ParseOk(m.Encode());
    ASSERT_EQ(back.num_ranges(), m.num_ranges());
    ASSERT_EQ(back.num_fields(), m.num_fields());
    for (uint64_t idx = 0; idx <= next + 2; ++idx) ASSERT_EQ(back.Lookup(idx), m.Lookup(idx));
  }
}

TEST(FieldMap, LibsvmParsingTakesFieldsFromTheMapAndKeepsTheIds) {
  const FieldMap m = ParseOk("1-10 0\n11-20 4\n150 2\n");
  Batch with, without;
  ASSERT_TRUE(ParseLibsvmLine("1 3:1 qid:9 12:0.5 150:2", 5, 0, &with, &m).ok());
  ASSERT_TRUE(ParseLibsvmLine("1 3:1 qid:9 12:0.5 150:2", 5, 0, &without).ok());
  EXPECT_EQ(with.fields, (std::vector<uint32_t>{0, 4, 2}));
  EXPECT_EQ(without.fields, (std::vector<uint32_t>{0, 0, 0}));
  EXPECT_EQ(with.ids, without.ids);
  EXPECT_EQ(with.ids[2], HashIndex(0, 150, 5));
  EXPECT_EQ(with.values, without.values);
  ASSERT_TRUE(ParseLine(Format::kLibsvm, "0", 5, 0, &with, &m).ok());  // no features: fine
  // An index outside the map: the line is malformed and the batch is left as it was.
  const Batch before = with;
  Status s = ParseLibsvmLine("1 3:1 13:1 21:1", 5, 0, &with, &m);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "feature index 21 is not in the field map");
  EXPECT_EQ(with.labels, before.labels);
  EXPECT_EQ(with.offsets, before.offsets);
  EXPECT_EQ(with.ids, before.ids);
  EXPECT_EQ(with.values, before.values);
  EXPECT_EQ(with.fields, before.fields);
  EXPECT_TRUE(with.Validate().ok());
  // Other formats carry their own fields.
  EXPECT_FALSE(ParseLine(Format::kLibffm, "1 1:2:1", 0, 0, &with, &m).ok());
}

TEST(FieldMap, ReaderWithAMap) {
  TempDir dir;
  std::string text;
  for (int i = 1; i <= 600; ++i) {
    text += std::to_string(i % 2) + " " + std::to_string(i % 30) + ":1 " +
            std::to_string(100 + i % 50) + ":0.5\n";
  }
  WriteFile(dir.File("m.svm"), text);
  // 0..9 -> 0, 10..29 -> 1, 100..149 -> 2 + (index - 100) / 25; nothing else.
  auto map = std::make_shared<FieldMap>(ParseOk("0-9 0\n10-29 1\n100-124 2\n125-149 3\n"));
  EXPECT_EQ(map->num_fields(), 4u);
  ReaderOptions o;
  o.files = {dir.File("m.svm")};
  o.field_map = map;
  o.buffer_bytes = 1024;
  Result<Batch> one = testing::OpenAndReadAll(o);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_EQ(one->size(), 600u);
  for (size_t i = 0; i < one->size(); ++i) {
    const uint64_t k = i + 1;
    const uint32_t a = one->offsets[i];
    EXPECT_EQ(one->fields[a], k % 30 < 10 ? 0u : 1u);
    EXPECT_EQ(one->fields[a + 1], 2u + static_cast<uint32_t>((k % 50) / 25));
    EXPECT_EQ(one->ids[a], HashIndex(0, k % 30, 0));
  }
  o.threads = 3;
  Result<Batch> three = testing::OpenAndReadAll(o);
  ASSERT_TRUE(three.ok());
  testing::ExpectSameBatch(*one, *three);

  // Unmapped indices: malformed lines, reported with file and line.
  WriteFile(dir.File("u.svm"), "1 1:1\n0 5:1 200:1\n1 2:1\n");
  testing::Messages msgs;
  o.files = {dir.File("u.svm")};
  o.on_malformed = msgs.Sink();
  for (int threads : {1, 3}) {
    msgs.lines.clear();
    o.threads = threads;
    auto r = Reader::Open(o);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(testing::ReadAll(r->get()).size(), 2u);
    EXPECT_EQ((*r)->stats().malformed, 1u);
    ASSERT_EQ(msgs.lines.size(), 1u);
    EXPECT_EQ(msgs.lines[0], dir.File("u.svm") + ":2: feature index 200 is not in the field map");
  }
}

TEST(FieldMap, ReaderRefusesAMapForOtherFormatsAndAnEmptyMap) {
  TempDir dir;
  WriteFile(dir.File("f.ffm"), "1 0:1:1\n");
  ReaderOptions o;
  o.files = {dir.File("f.ffm")};
  o.field_map = std::make_shared<FieldMap>(ParseOk("1 0\n"));
  for (Format f : {Format::kLibffm, Format::kCriteo}) {
    o.format = f;
    auto r = Reader::Open(o);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("libsvm input only"), std::string::npos)
        << r.status().ToString();
  }
  o.format = Format::kLibsvm;
  EXPECT_TRUE(Reader::Open(o).ok());
  o.field_map = std::make_shared<FieldMap>();
  EXPECT_FALSE(Reader::Open(o).ok());
}

}  // namespace
}  // namespace ferry::models
