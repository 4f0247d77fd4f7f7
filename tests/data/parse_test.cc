// The single-line parsers: every accepted spelling, and every rejection leaving the batch as it
// was.
#include "models/data/parse.h"

#include <gtest/gtest.h>

#include <string>

#include "models/data/hashing.h"

namespace ferry::models {
namespace {

Batch ParseOk(Format format, std::string_view line, uint64_t seed = 0) {
  Batch b;
  Status s = ParseLine(format, line, seed, 0, &b);
  EXPECT_TRUE(s.ok()) << line << ": " << s.ToString();
  EXPECT_TRUE(b.Validate().ok());
  return b;
}

std::string ParseError(Format format, std::string_view line) {
  Batch b;
  if (format != Format::kCriteo) {
    EXPECT_TRUE(ParseLine(format, format == Format::kLibsvm ? "1 5:1" : "1 2:5:1", 0, 0, &b).ok());
  }
  const Batch before = b;
  Status s = ParseLine(format, line, 0, 0, &b);
  EXPECT_FALSE(s.ok()) << "accepted: " << line;
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  // Rolled back: exactly the batch from before.
  EXPECT_EQ(b.labels, before.labels);
  EXPECT_EQ(b.offsets, before.offsets);
  EXPECT_EQ(b.ids, before.ids);
  EXPECT_EQ(b.values, before.values);
  EXPECT_EQ(b.fields, before.fields);
  return s.message();
}

TEST(Libsvm, LabelSpellings) {
  for (const char* pos : {"1", "+1", "1.0", "1e0"}) {
    EXPECT_EQ(ParseOk(Format::kLibsvm, std::string(pos) + " 3:1").labels[0], 1.0f) << pos;
  }
  for (const char* neg : {"0", "-1", "0.0", "-1.0", "+0"}) {
    EXPECT_EQ(ParseOk(Format::kLibsvm, std::string(neg) + " 3:1").labels[0], 0.0f) << neg;
  }
  EXPECT_NE(ParseError(Format::kLibsvm, "2 3:1").find("label '2'"), std::string::npos);
  ParseError(Format::kLibsvm, "abc 3:1");
  ParseError(Format::kLibsvm, "0.5 3:1");
  ParseError(Format::kLibsvm, "+-1 3:1");
}

TEST(Libsvm, FeaturesHashedByIndexInFieldZero) {
  const Batch b = ParseOk(Format::kLibsvm, "1 0:1 7:0.5 123456789012:-2.5e-3", 11);
  ASSERT_EQ(b.nnz(), 3u);
  EXPECT_EQ(b.ids[0], HashIndex(0, 0, 11));  // 0-based index accepted
  EXPECT_EQ(b.ids[1], HashIndex(0, 7, 11));
  EXPECT_EQ(b.ids[2], HashIndex(0, 123456789012ull, 11));
  EXPECT_EQ(b.values, (std::vector<float>{1.0f, 0.5f, -2.5e-3f}));
  EXPECT_EQ(b.fields, (std::vector<uint32_t>{0, 0, 0}));
  EXPECT_EQ(b.offsets, (std::vector<uint32_t>{0, 3}));
}

TEST(Libsvm, QidCommentsTabsAndCrlf) {
  const Batch a = ParseOk(Format::kLibsvm, "1 qid:3 1:1 2:+0.5 # note: 9:9");
  const Batch b = ParseOk(Format::kLibsvm, "+1\t1:1  \t2:.5\r");
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(ParseOk(Format::kLibsvm, "0").nnz(), 0u);  // no features: empty sample
  EXPECT_EQ(ParseOk(Format::kLibsvm, "1 # only").nnz(), 0u);
  EXPECT_TRUE(IsBlankLine(Format::kLibsvm, "   \t\r"));
  EXPECT_TRUE(IsBlankLine(Format::kLibsvm, "  # a comment line"));
  EXPECT_FALSE(IsBlankLine(Format::kLibsvm, " 1"));
}

TEST(Libsvm, MalformedFeaturesNameTheToken) {
  EXPECT_NE(ParseError(Format::kLibsvm, "1 3:1 4").find("feature 2 '4' is not idx:val"),
            std::string::npos);
  EXPECT_NE(ParseError(Format::kLibsvm, "1 -3:1").find("index"), std::string::npos);
  EXPECT_NE(ParseError(Format::kLibsvm, "1 3:x").find("value"), std::string::npos);
  ParseError(Format::kLibsvm, "1 3:nan");
  ParseError(Format::kLibsvm, "1 3:inf");
  ParseError(Format::kLibsvm, "1 3:1e99");
  ParseError(Format::kLibsvm, "1 :1");
  ParseError(Format::kLibsvm, "1 3:");
  ParseError(Format::kLibsvm, "1 99999999999999999999:1");  // index beyond 64 bits
  EXPECT_EQ(ParseError(Format::kLibsvm, "   "), "empty line");
}

TEST(Libsvm, RejectsBadHashBits) {
  Batch b;
  EXPECT_FALSE(ParseLibsvmLine("1 2:1", 0, 3, &b).ok());
  EXPECT_TRUE(ParseLibsvmLine("1 2:1", 0, 16, &b).ok());
  EXPECT_LT(b.ids[0], 1u << 16);
}

TEST(Libffm, FieldsKeptAndHashed) {
  const Batch b = ParseOk(Format::kLibffm, "-1 0:5:1 3:5:0.25 4294967295:1:2", 3);
  EXPECT_EQ(b.labels[0], 0.0f);
  EXPECT_EQ(b.fields, (std::vector<uint32_t>{0, 3, 4294967295u}));
  EXPECT_EQ(b.ids[0], HashIndex(0, 5, 3));
  EXPECT_EQ(b.ids[1], HashIndex(3, 5, 3));
  EXPECT_NE(b.ids[0], b.ids[1]);
  EXPECT_EQ(b.values[1], 0.25f);
  ParseError(Format::kLibffm, "1 5:1");
  ParseError(Format::kLibffm, "1 4294967296:1:1");
  ParseError(Format::kLibffm, "1 a:1:1");
  ParseError(Format::kLibffm, "1 1:b:1");
  ParseError(Format::kLibffm, "1 1:1:c");
  ParseError(Format::kLibffm, "3 1:1:1");
}

std::string CriteoLine(const std::string& label, const std::vector<std::string>& ints,
                       const std::vector<std::string>& cats) {
  std::string line = label;
  for (size_t i = 0; i < kCriteoIntColumns; ++i) line += "\t" + (i < ints.size() ? ints[i] : "");
  for (size_t i = 0; i < kCriteoCatColumns; ++i) line += "\t" + (i < cats.size() ? cats[i] : "");
  return line;
}

TEST(Criteo, BucketsAndTokens) {
  EXPECT_EQ(CriteoBucket(-3), -3);
  EXPECT_EQ(CriteoBucket(0), 0);
  EXPECT_EQ(CriteoBucket(2), 2);
  EXPECT_EQ(CriteoBucket(3), 1);      // floor(log(3)^2) = floor(1.207)
  EXPECT_EQ(CriteoBucket(10), 5);     // floor(5.30)
  EXPECT_EQ(CriteoBucket(1000), 47);  // floor(47.7)
  const Batch b = ParseOk(
      Format::kCriteo, CriteoLine("1", {"5", "-1", "", "1000"}, {"68fd1e64", "", "80e26c9b"}), 4);
  EXPECT_EQ(b.labels[0], 1.0f);
  ASSERT_EQ(b.nnz(), 5u);  // empty columns add nothing
  EXPECT_EQ(b.fields, (std::vector<uint32_t>{0, 1, 3, 13, 15}));
  EXPECT_EQ(b.ids[0], HashToken(0, "2", 4));  // 5 -> floor(log(5)^2) = 2
  EXPECT_EQ(b.ids[0], CriteoIntId(0, 5, 4, 0));
  EXPECT_EQ(b.ids[1], HashToken(1, "-1", 4));
  EXPECT_EQ(b.ids[2], HashToken(3, "47", 4));
  EXPECT_EQ(b.ids[3], HashToken(13, "68fd1e64", 4));
  EXPECT_EQ(b.ids[4], HashToken(15, "80e26c9b", 4));
  EXPECT_EQ(b.values, (std::vector<float>(5, 1.0f)));
}

TEST(Criteo, AllColumnsEmptyIsAnEmptySample) {
  const Batch b = ParseOk(Format::kCriteo, CriteoLine("0", {}, {}) + "\r");
  EXPECT_EQ(b.size(), 1u);
  EXPECT_EQ(b.nnz(), 0u);
  EXPECT_TRUE(IsBlankLine(Format::kCriteo, "\r"));
  EXPECT_FALSE(IsBlankLine(Format::kCriteo, " "));
}

TEST(Criteo, Malformed) {
  EXPECT_NE(ParseError(Format::kCriteo, "1\t2\t3").find("has 3 tab-separated columns, want 40"),
            std::string::npos);
  EXPECT_NE(ParseError(Format::kCriteo, CriteoLine("1", {}, {}) + "\textra").find("more than 40"),
            std::string::npos);
  ParseError(Format::kCriteo, CriteoLine("2", {}, {}));
  ParseError(Format::kCriteo, CriteoLine("", {}, {}));
  EXPECT_NE(ParseError(Format::kCriteo, CriteoLine("1", {"1", "x"}, {"a"})).find("I2 'x'"),
            std::string::npos);
  ParseError(Format::kCriteo, CriteoLine("1", {"1.5"}, {}));
  ParseError(Format::kCriteo, "");
}

TEST(Batch, ClearAppendTruncateValidate) {
  Batch b;
  EXPECT_EQ(b.offsets, (std::vector<uint32_t>{0}));  // a default Batch is the empty batch
  ASSERT_TRUE(ParseLibsvmLine("1 1:1 2:1", 0, 0, &b).ok());
  ASSERT_TRUE(ParseLibsvmLine("0", 0, 0, &b).ok());
  ASSERT_TRUE(ParseLibsvmLine("1 3:2", 0, 0, &b).ok());
  EXPECT_TRUE(b.Validate().ok());
  Batch c;
  ASSERT_TRUE(c.Append(b, 1, 2).ok());
  EXPECT_EQ(c.labels, (std::vector<float>{0, 1}));
  EXPECT_EQ(c.offsets, (std::vector<uint32_t>{0, 0, 1}));
  EXPECT_EQ(c.values, (std::vector<float>{2}));
  b.Truncate(1);
  EXPECT_EQ(b.size(), 1u);
  EXPECT_EQ(b.nnz(), 2u);
  EXPECT_TRUE(b.Validate().ok());
  const size_t capacity = b.ids.capacity();
  b.Clear();
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(b.offsets, (std::vector<uint32_t>{0}));
  EXPECT_EQ(b.ids.capacity(), capacity);
  b.labels.push_back(2);
  b.offsets.push_back(0);
  EXPECT_FALSE(b.Validate().ok());
}

TEST(Formats, Names) {
  EXPECT_EQ(*ParseFormat("libsvm"), Format::kLibsvm);
  EXPECT_EQ(*ParseFormat("svmlight"), Format::kLibsvm);
  EXPECT_EQ(*ParseFormat("criteo"), Format::kCriteo);
  EXPECT_EQ(*ParseFormat("libffm"), Format::kLibffm);
  Result<Format> bad = ParseFormat("csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("libsvm, criteo or libffm"), std::string::npos);
}

}  // namespace
}  // namespace ferry::models
