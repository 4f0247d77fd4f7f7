// The generator: determinism, the truth model's calibration, the truth file, and that every
// output format reads back as the samples that were generated.
#include "models/data/gen.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "models/data/hashing.h"
#include "models/data/reader.h"
#include "tests/data/data_test_util.h"

namespace ferry::models {
namespace {

using testing::ReadFile;
using testing::TempDir;

GenOptions Small(const TempDir& dir, Truth truth = Truth::kLr) {
  GenOptions o;
  o.samples = 3000;
  o.test_samples = 20000;
  o.fields = 8;
  o.vocab = 50;
  o.numeric = 2;
  o.truth = truth;
  o.out = dir.File("train");
  o.test_out = dir.File("test");
  o.seed = 17;
  return o;
}

TEST(Gen, SameSeedSameBytesOtherSeedOtherBytes) {
  TempDir dir;
  GenOptions o = Small(dir);
  o.test_samples = 100;
  ASSERT_TRUE(Generate(o).ok());
  const std::string a = ReadFile(o.out), at = ReadFile(o.test_out);
  o.out = dir.File("again");
  o.test_out = dir.File("again-test");
  ASSERT_TRUE(Generate(o).ok());
  EXPECT_EQ(ReadFile(o.out), a);
  EXPECT_EQ(ReadFile(o.test_out), at);
  EXPECT_FALSE(a.empty());
  // More training samples leave the test set alone.
  o.samples = 5000;
  ASSERT_TRUE(Generate(o).ok());
  EXPECT_EQ(ReadFile(o.test_out), at);
  EXPECT_EQ(ReadFile(o.out).substr(0, a.size()), a);
  o.seed = 18;
  ASSERT_TRUE(Generate(o).ok());
  EXPECT_NE(ReadFile(o.test_out), at);
}

TEST(Gen, TruthIsCalibratedIntoTheExpectedBand) {
  for (Truth truth : {Truth::kLr, Truth::kFm, Truth::kMlp}) {
    TempDir dir;
    Result<GenSummary> s = Generate(Small(dir, truth));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_TRUE(s->on_test);
    EXPECT_GT(s->bayes_auc, 0.75) << TruthName(truth);
    EXPECT_LT(s->bayes_auc, 0.90) << TruthName(truth);
    EXPECT_GT(s->test_positive_rate, 0.15) << TruthName(truth);
    EXPECT_LT(s->test_positive_rate, 0.40) << TruthName(truth);
    EXPECT_GT(s->bayes_logloss, 0.2);
    EXPECT_LT(s->bayes_logloss, 0.6);
  }
}

TEST(Gen, LabelsFollowTheTruth) {
  // Coarse recovery: bucketing test samples by the truth's probability, the observed click rate
  // of each bucket matches the bucket's mean probability.
  TempDir dir;
  auto g = Generator::Create(Small(dir));
  ASSERT_TRUE(g.ok());
  double sum_p[5] = {}, clicks[5] = {}, count[5] = {};
  GenSample s;
  for (int i = 0; i < 40000; ++i) {
    (*g)->NextTest(&s);
    const double p = 1 / (1 + std::exp(-s.logit));
    const int b = std::min(4, static_cast<int>(p * 5));
    sum_p[b] += p;
    clicks[b] += s.label;
    count[b] += 1;
  }
  for (int b = 0; b < 5; ++b) {
    if (count[b] < 500) continue;
    EXPECT_NEAR(clicks[b] / count[b], sum_p[b] / count[b], 0.03) << "bucket " << b;
  }
}

TEST(Gen, ZipfMakesLowValuesFrequent) {
  TempDir dir;
  GenOptions o = Small(dir);
  o.vocab = 1000;
  auto g = Generator::Create(o);
  ASSERT_TRUE(g.ok());
  std::vector<int> hist(1000, 0);
  GenSample s;
  for (int i = 0; i < 20000; ++i) {
    (*g)->NextTrain(&s);
    hist[s.values[0]]++;
  }
  // P(1)/P(2) = 2^1.1 ~ 2.14; value 0 holds about 1/zeta-ish ~ 14% of the mass at s = 1.1.
  EXPECT_NEAR(static_cast<double>(hist[0]) / hist[1], 2.14, 0.3);
  EXPECT_GT(hist[0], 2000);
  EXPECT_GT(hist[1], hist[10]);
}

TEST(Gen, FeaturesSplitsTheTotalOverFields) {
  TempDir dir;
  GenOptions o = Small(dir);
  o.features = 103;
  auto g = Generator::Create(o);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ((*g)->total_vocab(), 103u);
  EXPECT_EQ((*g)->vocab(0), 13u);  // 103 = 8 * 12 + 7
  EXPECT_EQ((*g)->vocab(7), 12u);
  EXPECT_EQ((*g)->FeatureIndex(1, 0), 14u);
  EXPECT_EQ((*g)->NumericIndex(0), 104u);
}

TEST(Gen, TruthFileReadsBackToTheSameLogits) {
  for (Truth truth : {Truth::kLr, Truth::kFm, Truth::kMlp}) {
    TempDir dir;
    GenOptions o = Small(dir, truth);
    auto g = Generator::Create(o);
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE((*g)->WriteTruth(dir.File("truth")).ok());
    Result<TruthTable> t = LoadTruth(dir.File("truth"));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->kind, truth);
    EXPECT_EQ(t->offsets.back(), 8u * 50);
    GenSample s;
    for (int i = 0; i < 200; ++i) {
      (*g)->NextTest(&s);
      EXPECT_NEAR(t->Logit(s), s.logit, 1e-9 * (1 + std::abs(s.logit))) << TruthName(truth);
    }
  }
}

TEST(Gen, BadTruthFilesAreRefusedWithTheLine) {
  TempDir dir;
  testing::WriteFile(dir.File("t1"), "nope\n");
  Result<TruthTable> a = LoadTruth(dir.File("t1"));
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find(":1: not a ferry-gen truth file"), std::string::npos);
  testing::WriteFile(dir.File("t2"),
                     "ferry-gen-truth 1\nkind lr\nfields 1\nnumeric 0\nfactors 0\nhidden 0\n"
                     "vocab 2\nbias 0.5\nfeature 0 0 1.5\nfeature 0 9 1\n");
  Result<TruthTable> b = LoadTruth(dir.File("t2"));
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find(":10: bad feature line"), std::string::npos);
  EXPECT_FALSE(LoadTruth(dir.File("missing")).ok());
}

// What the reader must produce for sample s written in `format`.
void ExpectSample(const Generator& g, Format format, const GenSample& s, const Batch& b, size_t i) {
  const GenOptions& o = g.options();
  ASSERT_EQ(b.labels[i], s.label);
  std::vector<uint64_t> ids;
  std::vector<uint32_t> fields;
  std::vector<float> values;
  if (format == Format::kCriteo) {
    for (uint32_t k = 0; k < o.numeric; ++k) {
      ids.push_back(CriteoIntId(k, s.counts[k], 0, 0));
      fields.push_back(k);
      values.push_back(1);
    }
    for (uint32_t f = 0; f < o.fields; ++f) {
      ids.push_back(HashToken(kCriteoIntColumns + f, CriteoToken(f, s.values[f]), 0));
      fields.push_back(kCriteoIntColumns + f);
      values.push_back(1);
    }
  } else {
    const bool ffm = format == Format::kLibffm;
    for (uint32_t f = 0; f < o.fields; ++f) {
      ids.push_back(HashIndex(ffm ? f : 0, g.FeatureIndex(f, s.values[f]), 0));
      fields.push_back(ffm ? f : 0);
      values.push_back(1);
    }
    for (uint32_t k = 0; k < o.numeric; ++k) {
      if (s.counts[k] == 0) continue;
      ids.push_back(HashIndex(ffm ? o.fields + k : 0, g.NumericIndex(k), 0));
      fields.push_back(ffm ? o.fields + k : 0);
      values.push_back(static_cast<float>(std::log1p(s.counts[k])));
    }
  }
  const auto lo = b.offsets[i], hi = b.offsets[i + 1];
  EXPECT_EQ(std::vector<uint64_t>(b.ids.begin() + lo, b.ids.begin() + hi), ids);
  EXPECT_EQ(std::vector<uint32_t>(b.fields.begin() + lo, b.fields.begin() + hi), fields);
  EXPECT_EQ(std::vector<float>(b.values.begin() + lo, b.values.begin() + hi), values);
}

TEST(Gen, EveryFormatRoundTripsThroughTheReaders) {
  for (Format format : {Format::kLibsvm, Format::kLibffm, Format::kCriteo}) {
    for (bool gzip : {false, true}) {
      TempDir dir;
      GenOptions o = Small(dir, Truth::kFm);
      o.samples = 500;
      o.test_samples = 0;
      o.test_out.clear();
      o.format = format;
      o.gzip = gzip;
      if (format == Format::kCriteo) {
        o.fields = 26;
        o.numeric = 13;
      }
      ASSERT_TRUE(Generate(o).ok());
      ReaderOptions ro;
      ro.format = format;
      ro.files = {o.out};
      ro.strict = true;
      Result<Batch> b = testing::OpenAndReadAll(ro, 64);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      ASSERT_EQ(b->size(), 500u);
      auto g = Generator::Create(o);  // a fresh generator replays the same training stream
      ASSERT_TRUE(g.ok());
      GenSample s;
      for (size_t i = 0; i < 500; ++i) {
        (*g)->NextTrain(&s);
        ExpectSample(**g, format, s, *b, i);
        if (HasFailure()) return;
      }
    }
  }
}

TEST(Gen, OptionErrorsNameTheFlag) {
  TempDir dir;
  GenOptions o = Small(dir);
  o.format = Format::kCriteo;
  Result<GenSummary> s = Generate(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--fields 26 --numeric 13"), std::string::npos);
  o = Small(dir);
  o.test_out.clear();
  EXPECT_FALSE(Generate(o).ok());
  o = Small(dir);
  o.samples = 0;
  EXPECT_FALSE(Generate(o).ok());
  o = Small(dir);
  o.zipf = -1;
  EXPECT_FALSE(Generate(o).ok());
  o = Small(dir);
  o.out = dir.File("no/such/dir/file");
  s = Generate(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kIoError);
  EXPECT_EQ(ParseTruth("svm").ok(), false);
}

}  // namespace
}  // namespace ferry::models
