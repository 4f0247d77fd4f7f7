#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "models/io/model.h"
#include "models/io/model_reader.h"
#include "models/io/model_writer.h"
#include "tests/models/temp_path.h"

namespace ferry::models {
namespace {

using testing::TempPath;

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

ModelTable RandomTable(const char* name, uint32_t dim, size_t rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> v(0.0f, 0.3f);
  ModelTable t(name, dim);
  std::vector<uint64_t> keys;
  std::vector<float> values;
  for (size_t i = 0; i < rows; ++i) {
    keys.push_back(i == 0 ? 0 : i == 1 ? std::numeric_limits<uint64_t>::max() : rng());
    for (uint32_t d = 0; d < dim; ++d) values.push_back(v(rng));
  }
  EXPECT_TRUE(t.Append(keys, values).ok());
  return t;
}

Model SampleModel() {
  Model m;
  m.kind = ModelKind::kFm;
  m.params = {{"hash_bits", "24"},
              {"hash_seed", "0"},
              {"input_format", "criteo"},
              {"note", "two  spaces, tab\t, newline\n, backslash \\, ctl \x01, utf8 \xc3\xa9"},
              {"empty", ""}};
  m.tables.push_back(RandomTable("linear", 1, 40, 1));
  m.tables.push_back(RandomTable("factors", 4, 40, 2));
  // Special values survive both formats.
  std::vector<float> special = {-0.0f,
                                std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::denorm_min(),
                                std::numeric_limits<float>::max(),
                                1e-30f,
                                std::numeric_limits<float>::quiet_NaN(),
                                -std::numeric_limits<float>::quiet_NaN()};
  ModelTable dense("mlp.layer0", static_cast<uint32_t>(special.size()));
  EXPECT_TRUE(dense.Append(std::vector<uint64_t>{0}, special).ok());
  m.tables.push_back(std::move(dense));
  return m;
}

void ExpectSameModel(const Model& a, const Model& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.params, b.params);
  ASSERT_EQ(a.tables.size(), b.tables.size());
  for (size_t t = 0; t < a.tables.size(); ++t) {
    const ModelTable& x = a.tables[t];
    const ModelTable& y = b.tables[t];
    EXPECT_EQ(x.name(), y.name());
    EXPECT_EQ(x.dim(), y.dim());
    ASSERT_EQ(x.size(), y.size());
    EXPECT_TRUE(std::equal(x.keys().begin(), x.keys().end(), y.keys().begin()));
    // Bit-exact, so -0.0, NaN signs and denormals are checked too.
    if (!x.values().empty()) {
      EXPECT_EQ(std::memcmp(x.values().data(), y.values().data(), x.values().size_bytes()), 0)
          << x.name();
    }
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_EQ(y.Find(y.keys()[i]), y.Row(i));
    }
  }
}

class RoundTrip : public ::testing::TestWithParam<ModelFormat> {};

TEST_P(RoundTrip, InMemory) {
  const Model m = SampleModel();
  auto bytes = EncodeModel(m, GetParam());
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*DetectModelFormat(std::span<const uint8_t>(
                reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size())),
            GetParam());
  auto back = ParseModel(*bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameModel(m, *back);
  EXPECT_EQ(back->FindTable("linear")->Find(12345), nullptr);
}

TEST_P(RoundTrip, StreamedToFileInChunks) {
  const std::string path = TempPath("model");
  // 3000 rows of dim 100 (~1.2 MB): the binary writer splits the table into several blocks.
  const ModelTable big = RandomTable("embeddings", 100, 3000, 9);
  {
    auto w = ModelWriter::Create(path, GetParam(), ModelKind::kMlp, {{"mlp_shape", "x"}});
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE(w->BeginTable("embeddings", 100).ok());
    for (size_t first = 0; first < big.size(); first += 700) {
      const size_t n = std::min<size_t>(700, big.size() - first);
      ASSERT_TRUE(
          w->AppendRows(big.keys().subspan(first, n), big.values().subspan(first * 100, n * 100))
              .ok());
    }
    ASSERT_TRUE(w->EndTable().ok());
    ASSERT_TRUE(w->BeginTable("empty_table", 3).ok());
    ASSERT_TRUE(w->EndTable().ok());
    ASSERT_TRUE(w->BeginTable("bias", 1).ok());
    ASSERT_TRUE(w->AppendRow(7, std::vector<float>{0.5f}).ok());
    ASSERT_TRUE(w->EndTable().ok());
    EXPECT_FALSE(Exists(path)) << "nothing under the final name before Finish";
    ASSERT_TRUE(w->Finish().ok());
  }
  EXPECT_TRUE(Exists(path));
  EXPECT_FALSE(Exists(path + ".tmp"));
  auto m = ReadModelFile(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->kind, ModelKind::kMlp);
  Model expected;
  expected.kind = ModelKind::kMlp;
  expected.params = {{"mlp_shape", "x"}};
  expected.tables.push_back(big);
  expected.tables.emplace_back("empty_table", 3);
  expected.tables.emplace_back("bias", 1);
  ASSERT_TRUE(
      expected.tables.back().Append(std::vector<uint64_t>{7}, std::vector<float>{0.5f}).ok());
  ExpectSameModel(expected, *m);
  ::unlink(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Formats, RoundTrip,
                         ::testing::Values(ModelFormat::kBinary, ModelFormat::kText),
                         [](const auto& info) { return std::string(ModelFormatName(info.param)); });

TEST(ModelWriter, AbandonedWriterLeavesNoFile) {
  const std::string path = TempPath("abandoned");
  {
    auto w = ModelWriter::Create(path, ModelFormat::kBinary, ModelKind::kLr, {});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->BeginTable("weights", 1).ok());
    ASSERT_TRUE(w->AppendRow(1, std::vector<float>{1.0f}).ok());
  }
  EXPECT_FALSE(Exists(path));
  EXPECT_FALSE(Exists(path + ".tmp"));
}

TEST(ModelWriter, MisuseIsRefusedAndTheWriterStaysUsable) {
  std::string out;
  EXPECT_EQ(
      ModelWriter::CreateInMemory(&out, ModelFormat::kText, ModelKind::kLr, {{"bad key", "v"}})
          .status()
          .code(),
      Code::kInvalidArgument);
  auto w = ModelWriter::CreateInMemory(&out, ModelFormat::kText, ModelKind::kLr, {});
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->AppendRow(1, std::vector<float>{1.0f}).code(), Code::kInvalidArgument);
  EXPECT_EQ(w->EndTable().code(), Code::kInvalidArgument);
  EXPECT_EQ(w->BeginTable("has space", 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(w->BeginTable("", 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(w->BeginTable("w", 0).code(), Code::kInvalidArgument);
  ASSERT_TRUE(w->BeginTable("w", 2).ok());
  EXPECT_EQ(w->BeginTable("v", 2).code(), Code::kInvalidArgument);
  EXPECT_EQ(w->AppendRow(1, std::vector<float>{1.0f}).code(), Code::kInvalidArgument);
  EXPECT_EQ(w->Finish().code(), Code::kInvalidArgument);
  ASSERT_TRUE(w->AppendRow(1, std::vector<float>{1.0f, 2.0f}).ok());
  ASSERT_TRUE(w->EndTable().ok());
  EXPECT_EQ(w->BeginTable("w", 2).code(), Code::kInvalidArgument) << "repeated table name";
  ASSERT_TRUE(w->Finish().ok());
  EXPECT_EQ(w->Finish().code(), Code::kInvalidArgument);
  auto m = ParseModel(out);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->tables.size(), 1u);
}

// Record boundaries of a binary model: the preamble, then each record's end.
std::vector<size_t> RecordBoundaries(const std::string& bytes) {
  std::vector<size_t> out = {16};
  size_t pos = 16;
  while (pos + 8 <= bytes.size()) {
    uint32_t len = 0;
    std::memcpy(&len, bytes.data() + pos + 4, 4);
    pos += 8 + len + 8;
    out.push_back(pos);
  }
  return out;
}

TEST(BinaryModel, TruncationAnywhereIsRefusedAndNamed) {
  const std::string bytes = *EncodeModel(SampleModel(), ModelFormat::kBinary);
  const std::vector<size_t> bounds = RecordBoundaries(bytes);
  ASSERT_EQ(bounds.back(), bytes.size());
  ASSERT_EQ(bounds.size(), 1u + 1 + 3 * 3 + 1);  // preamble, HEAD, 3 x (TABL ROWS TEND), FEND
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto m = ParseModel(std::string_view(bytes).substr(0, n));
    ASSERT_FALSE(m.ok()) << "prefix " << n;
    ASSERT_EQ(m.status().code(), Code::kProtocol) << n << ": " << m.status().ToString();
  }
  // At a record boundary the message says what was complete and what is missing.
  const char* expect[] = {"after the preamble: expected the header record",
                          "after the header record: expected a table",
                          "after the header of table 'linear': expected rows",
                          "after row block 1 of table 'linear': expected rows or the end",
                          "after table 'linear': expected a table or the file end record",
                          "after the header of table 'factors'",
                          "after row block 1 of table 'factors'",
                          "after table 'factors'",
                          "after the header of table 'mlp.layer0'",
                          "after row block 1 of table 'mlp.layer0'",
                          "after table 'mlp.layer0': expected a table or the file end record"};
  for (size_t b = 0; b + 1 < bounds.size(); ++b) {
    auto m = ParseModel(std::string_view(bytes).substr(0, bounds[b]));
    EXPECT_NE(m.status().message().find("truncated"), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find(expect[b]), std::string::npos)
        << "boundary " << b << ": " << m.status().message();
  }
  // Inside a record: the record is named.
  auto mid = ParseModel(std::string_view(bytes).substr(0, bounds[2] + 20));
  EXPECT_NE(mid.status().message().find("truncated or corrupt in a row block of table 'linear'"),
            std::string::npos)
      << mid.status().message();
}

TEST(BinaryModel, EveryFlippedByteIsCaught) {
  const std::string bytes = *EncodeModel(SampleModel(), ModelFormat::kBinary);
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t mask : {0x01, 0x80}) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      auto m = ParseModel(bad);
      ASSERT_FALSE(m.ok()) << "byte " << i << " mask " << int{mask};
      ASSERT_EQ(m.status().code(), Code::kProtocol) << i;
    }
  }
  std::string bad = bytes;
  bad[40] ^= 0x10;  // inside the header record's payload
  EXPECT_NE(ParseModel(bad).status().message().find("checksum mismatch in the header record"),
            std::string::npos)
      << ParseModel(bad).status().message();
}

TEST(BinaryModel, WrongMagicVersionAndTrailingBytes) {
  const std::string bytes = *EncodeModel(SampleModel(), ModelFormat::kBinary);
  std::string bad = bytes;
  bad[0] = 'X';
  EXPECT_NE(ParseModel(bad).status().message().find("not a Ferry model"), std::string::npos);
  bad = bytes;
  bad[8] = 2;  // version 2
  EXPECT_EQ(ParseModel(bad).status().code(), Code::kProtocol);
  EXPECT_NE(ParseModel(bad).status().message().find("version 2 is not supported"),
            std::string::npos)
      << ParseModel(bad).status().message();
  bad = bytes + "x";
  EXPECT_NE(ParseModel(bad).status().message().find("trailing"), std::string::npos);
  EXPECT_EQ(ParseModel(std::string_view()).status().code(), Code::kProtocol);
  EXPECT_NE(ParseModel(std::string_view("FERR")).status().message().find("preamble"),
            std::string::npos);
}

// Recomputes every record checksum and the file checksum, so mutated content reaches the
// parser's structural checks instead of stopping at a checksum.
void Reseal(std::string& bytes) {
  size_t pos = 16;
  while (pos + 8 <= bytes.size()) {
    uint32_t len = 0;
    std::memcpy(&len, bytes.data() + pos + 4, 4);
    if (len > bytes.size() - pos - 8 || bytes.size() - pos - 8 - len < 8) return;
    if (std::memcmp(bytes.data() + pos, "FEND", 4) == 0 && len >= 16) {
      const uint64_t file = XXH3_64bits(bytes.data(), pos);
      std::memcpy(bytes.data() + pos + 16, &file, 8);
    }
    const uint64_t h = XXH3_64bits(bytes.data() + pos, 8 + len);
    std::memcpy(bytes.data() + pos + 8 + len, &h, 8);
    pos += 16 + len;
  }
}

TEST(BinaryModel, ResealedMutationsAreRefusedOrParsedNeverCrash) {
  const std::string bytes = *EncodeModel(SampleModel(), ModelFormat::kBinary);
  std::string resealed = bytes;
  Reseal(resealed);
  ASSERT_EQ(resealed, bytes) << "Reseal reproduces the writer's checksums";
  std::mt19937_64 rng(11);
  int refused = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string bad = bytes;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = 16 + rng() % (bad.size() - 16);
      switch (rng() % 4) {
        case 0:  // random byte
          bad[at] = static_cast<char>(rng());
          break;
        case 1:  // a large little-endian u32 (lengths, counts, dims)
          for (int k = 0; k < 4 && at + k < bad.size(); ++k) bad[at + k] = static_cast<char>(0xff);
          break;
        case 2:  // delete a run
          bad.erase(at, 1 + rng() % 24);
          break;
        default:  // insert a run
          bad.insert(at, std::string(1 + rng() % 24, static_cast<char>(rng())));
          break;
      }
      if (bad.size() <= 16) break;
    }
    Reseal(bad);
    auto m = ParseModel(bad);
    if (!m.ok()) {
      ++refused;
      ASSERT_EQ(m.status().code(), Code::kProtocol) << m.status().ToString();
    }
  }
  EXPECT_GT(refused, 1000);
}

TEST(BinaryModel, RemovedTableIsCaughtByTheWholeFileChecksum) {
  const std::string bytes = *EncodeModel(SampleModel(), ModelFormat::kBinary);
  const std::vector<size_t> b = RecordBoundaries(bytes);
  // Drop table 'factors' (records TABL, ROWS, TEND between boundaries 4 and 7): every remaining
  // record is intact, only the whole-file checksum and table count can tell.
  const std::string cut = bytes.substr(0, b[4]) + bytes.substr(b[7]);
  auto m = ParseModel(cut);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("whole-file checksum"), std::string::npos)
      << m.status().message();
}

TEST(BinaryModel, DuplicateKeysAreRefused) {
  std::string out;
  auto w = ModelWriter::CreateInMemory(&out, ModelFormat::kBinary, ModelKind::kLr, {});
  ASSERT_TRUE(w->BeginTable("weights", 1).ok());
  ASSERT_TRUE(w->AppendRows(std::vector<uint64_t>{5, 6, 5}, std::vector<float>{1, 2, 3}).ok());
  ASSERT_TRUE(w->EndTable().ok());
  ASSERT_TRUE(w->Finish().ok());
  auto m = ParseModel(out);
  EXPECT_EQ(m.status().code(), Code::kProtocol);
  EXPECT_NE(m.status().message().find("key 5 twice"), std::string::npos) << m.status().message();
}

TEST(TextModel, TruncationAnywhereIsRefused) {
  const std::string text = *EncodeModel(SampleModel(), ModelFormat::kText);
  for (size_t n = 0; n < text.size(); ++n) {
    auto m = ParseModel(std::string_view(text).substr(0, n));
    ASSERT_FALSE(m.ok()) << "prefix " << n;
    ASSERT_EQ(m.status().code(), Code::kProtocol) << n << ": " << m.status().ToString();
  }
  const size_t cut = text.find("end-table factors");
  auto m = ParseModel(std::string_view(text).substr(0, cut));
  EXPECT_NE(m.status().message().find("truncated"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("table 'factors' has 40 rows so far"), std::string::npos)
      << m.status().message();
}

TEST(TextModel, RandomMutationsAreRefusedOrParsedNeverCrash) {
  const std::string text = *EncodeModel(SampleModel(), ModelFormat::kText);
  const std::string alphabet = "0123456789 \t\n\\#-.exnaif";
  std::mt19937_64 rng(12);
  for (int round = 0; round < 2000; ++round) {
    std::string bad = text;
    for (int e = 0; e < 1 + static_cast<int>(rng() % 3); ++e) {
      const size_t at = rng() % bad.size();
      if (rng() % 2 == 0) {
        bad[at] = alphabet[rng() % alphabet.size()];
      } else {
        bad.erase(at, 1 + rng() % 8);
        if (bad.empty()) break;
      }
    }
    auto m = ParseModel(bad);
    if (!m.ok()) {
      ASSERT_EQ(m.status().code(), Code::kProtocol) << m.status().ToString();
    }
  }
}

TEST(TextModel, HandWrittenFileWithCommentsParses) {
  const std::string text =
      "ferry-model text 1\n"
      "# a comment\n"
      "\n"
      "kind lr\n"
      "param hash_bits 20\n"
      "param with_spaces  a  b \n"
      "table weights 1\n"
      "   # comment inside a table\n"
      "1 0.5\n"
      "18446744073709551615\t-2e-3\n"
      "end-table weights 2\n"
      "end 1\n"
      "# trailing comment\n";
  auto m = ParseModel(text);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->kind, ModelKind::kLr);
  EXPECT_EQ(m->params.at("with_spaces"), " a  b ");
  auto t = m->RequireTable("weights", 1);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*(*t)->Find(1), 0.5f);
  EXPECT_EQ(*(*t)->Find(18446744073709551615ull), -2e-3f);
}

TEST(TextModel, CorruptLinesAreRefusedWithTheirLineNumber) {
  const std::string head = "ferry-model text 1\nkind fm\ntable v 2\n";
  struct Case {
    std::string text;
    const char* message;
  };
  const Case cases[] = {
      {head + "1 0.5\nend-table v 1\nend 1\n", "line 4: row 1 has 1 values"},
      {head + "1 0.5 0.25 0.125\nend-table v 1\nend 1\n", "more than 2 values"},
      {head + "1 0.5 zz\nend-table v 1\nend 1\n", "is not a float"},
      {head + "1 0.5 1e999\nend-table v 1\nend 1\n", "is not a float"},
      {head + "1x 0.5 1\nend-table v 1\nend 1\n", "row key is not"},
      {head + "1 0.5 1\nend-table v 2\nend 1\n", "ends claiming 2 rows but has 1"},
      {head + "1 0.5 1\n1 0.5 1\nend-table v 2\nend 1\n", "key 1 twice"},
      {head + "1 0.5 1\nend-table v 1\nend 2\n", "claims 2 tables"},
      {head + "1 0.5 1\nend-table v 1\nend 1\nextra\n", "content after the end line"},
      {head + "1 0.5 1\nend-table w 1\nend 1\n", "expected a row or \"end-table v"},
      {"ferry-model text 2\nkind fm\nend 0\n", "text model version 2 is not supported"},
      {"ferry-model text 1\nkind svm\nend 0\n", "unknown model kind 'svm'"},
      {"ferry-model text 1\nkind fm\nparam a \\q\nend 0\n", "invalid escape"},
      {"ferry-model text 1\nkind fm\nparam a 1\nparam a 2\nend 0\n", "'a' appears twice"},
      {"ferry-model text 1\nkind fm\ntable v 0\n", "dim 0"},
      {"ferry-model text 1\nkind fm\nend 0", "not terminated by a newline"},
      {"ferry-model binary 1\n", "first line must be"},
      {"hello\n", "not a Ferry model"},
  };
  for (const Case& c : cases) {
    auto m = ParseModel(c.text);
    ASSERT_FALSE(m.ok()) << c.text;
    EXPECT_EQ(m.status().code(), Code::kProtocol) << c.text;
    EXPECT_NE(m.status().message().find(c.message), std::string::npos)
        << "expected '" << c.message << "' in: " << m.status().message();
  }
}

TEST(Model, RequireTableAndParamExplainMismatches) {
  const Model m = SampleModel();
  auto t = m.RequireTable("factors", 8);
  EXPECT_EQ(t.status().code(), Code::kProtocol);
  EXPECT_NE(t.status().message().find("has dim 4 but this model needs dim 8"), std::string::npos)
      << t.status().message();
  auto missing = m.RequireTable("embeddings", 4);
  EXPECT_EQ(missing.status().code(), Code::kProtocol);
  EXPECT_NE(missing.status().message().find("'linear', 'factors', 'mlp.layer0'"), std::string::npos)
      << missing.status().message();
  EXPECT_EQ(*m.RequireParam("hash_bits"), "24");
  EXPECT_EQ(m.RequireParam("nope").status().code(), Code::kProtocol);
  EXPECT_EQ(ParseModelKind("svm").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(*ParseModelKind("ftrl"), ModelKind::kFtrl);
  EXPECT_EQ(*ParseModelFormat("text"), ModelFormat::kText);
}

TEST(Model, ReadModelFileErrors) {
  EXPECT_EQ(ReadModelFile(TempPath("does-not-exist")).status().code(), Code::kNotFound);
  const std::string path = TempPath("garbage");
  std::ofstream(path) << "FERRYMDL garbage";
  auto m = ReadModelFile(path);
  EXPECT_EQ(m.status().code(), Code::kProtocol);
  EXPECT_EQ(m.status().message().rfind(path + ": ", 0), 0u) << m.status().message();
  ::unlink(path.c_str());
}

TEST(ModelTable, LookupMatchesUnorderedMap) {
  std::mt19937_64 rng(3);
  ModelTable t("t", 2);
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 5000; ++i) keys.push_back(i % 2 == 0 ? i : rng());  // dense + random
  std::vector<float> values(keys.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  ASSERT_TRUE(t.Append(keys, values).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    const float* row = t.Find(keys[i]);
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(row[0], static_cast<float>(2 * i));
  }
  EXPECT_EQ(t.Find(1), nullptr);
  EXPECT_EQ(t.Append(std::vector<uint64_t>{keys[7]}, std::vector<float>{0, 0}).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(t.size(), keys.size());
}

}  // namespace
}  // namespace ferry::models
