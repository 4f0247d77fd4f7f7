// The generator: determinism, the truth model's calibration, the truth file, and that every
// output format reads back as the samples that were generated; the ffm truth and the text
// layout (bag-of-words documents).
#include "models/data/gen.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <string_view>

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

// Text documents: a 2000-word vocabulary, 60 tokens per document on average.
GenOptions SmallText(const TempDir& dir) {
  GenOptions o;
  o.layout = Layout::kText;
  o.samples = 2000;
  o.test_samples = 10000;
  o.vocab = 2000;
  o.words = 60;
  o.out = dir.File("train");
  o.test_out = dir.File("test");
  o.seed = 23;
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
  for (Truth truth : {Truth::kLr, Truth::kFm, Truth::kFfm, Truth::kMlp}) {
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
  for (Truth truth : {Truth::kLr, Truth::kFm, Truth::kFfm, Truth::kMlp}) {
    TempDir dir;
    GenOptions o = Small(dir, truth);
    o.factors = truth == Truth::kFfm ? 5 : 4;  // a partial chunk of four lanes too
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

TEST(Gen, TextTruthFileReadsBackToTheSameLogits) {
  TempDir dir;
  auto g = Generator::Create(SmallText(dir));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_TRUE((*g)->WriteTruth(dir.File("truth")).ok());
  Result<TruthTable> t = LoadTruth(dir.File("truth"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->layout, Layout::kText);
  EXPECT_EQ(t->kind, Truth::kLr);
  EXPECT_EQ(t->fields, 1u);
  EXPECT_EQ(t->offsets.back(), 2000u);
  GenSample s;
  for (int i = 0; i < 200; ++i) {
    (*g)->NextTest(&s);
    EXPECT_NEAR(t->Logit(s), s.logit, 1e-9 * (1 + std::abs(s.logit)));
  }
  // Heavy-tailed word weights: the topic words (among the vocab / 50 most frequent words, past
  // the 10 stop words) carry the weight; every other word is near 0.
  std::vector<double> mag;
  double topic = 0, tail = 0;
  for (size_t w = 0; w < t->weight.size(); ++w) {
    mag.push_back(std::abs(t->weight[w]));
    (w < t->weight.size() / 50 ? topic : tail) =
        std::max(w < t->weight.size() / 50 ? topic : tail, std::abs(t->weight[w]));
  }
  std::sort(mag.begin(), mag.end());
  const double median = mag[mag.size() / 2];
  // (The file holds the weights times the calibration's scale: only ratios are fixed.)
  EXPECT_GT(topic, 10 * tail);
  EXPECT_GT(topic, 20 * median);
}

// ffm: u[f][v][g] of different g are drawn independently (so no single vector per value, as an
// FM has, reproduces them), and the pairwise terms add about as much variance as the linear ones.
TEST(Gen, FfmVectorsDifferPerOtherFieldAndCarryHalfTheVariance) {
  TempDir dir;
  GenOptions o = Small(dir, Truth::kFfm);
  o.numeric = 0;
  auto g = Generator::Create(o);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->WriteTruth(dir.File("truth")).ok());
  Result<TruthTable> t = LoadTruth(dir.File("truth"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->VectorStride(), 8u * 4);
  // Field 0's blocks for g = 1 and g = 2, over all values and entries: uncorrelated.
  double sab = 0, saa = 0, sbb = 0;
  for (uint64_t v = 0; v < 50; ++v) {
    const double* row = &t->vectors[v * t->VectorStride()];
    EXPECT_EQ(row[0], 0.0);  // the own-field block is unused
    for (uint32_t j = 0; j < 4; ++j) {
      const double a = row[1 * 4 + j], b = row[2 * 4 + j];
      sab += a * b, saa += a * a, sbb += b * b;
    }
  }
  EXPECT_LT(std::abs(sab / std::sqrt(saa * sbb)), 0.25);
  // Linear part against pairwise part of the logit, over samples.
  GenSample s;
  double lin = 0, lin2 = 0, pair = 0, pair2 = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    (*g)->NextTest(&s);
    double l = 0;
    for (uint32_t f = 0; f < 8; ++f) l += t->weight[t->offsets[f] + s.values[f]];
    const double p = s.logit - t->bias - l;
    lin += l, lin2 += l * l, pair += p, pair2 += p * p;
  }
  const double var_lin = lin2 / n - (lin / n) * (lin / n);
  const double var_pair = pair2 / n - (pair / n) * (pair / n);
  EXPECT_GT(var_pair / var_lin, 0.4);
  EXPECT_LT(var_pair / var_lin, 2.5);
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
  testing::WriteFile(dir.File("t3"),
                     "ferry-gen-truth 1\nkind fm\nlayout text\nfields 1\nnumeric 0\nfactors 4\n"
                     "hidden 0\nvocab 2\n");
  Result<TruthTable> c = LoadTruth(dir.File("t3"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(":8: a text truth is lr"), std::string::npos);
  testing::WriteFile(dir.File("t4"), "ferry-gen-truth 1\nlayout poem\n");
  Result<TruthTable> d = LoadTruth(dir.File("t4"));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find(":2: unknown layout 'poem'"), std::string::npos);
  // An ffm feature line carries fields * factors vector entries.
  testing::WriteFile(dir.File("t5"),
                     "ferry-gen-truth 1\nkind ffm\nfields 2\nnumeric 0\nfactors 2\nhidden 0\n"
                     "vocab 1 1\nbias 0\nfeature 0 0 1 0 0 3 4\nfeature 1 0 1 5 6\n");
  Result<TruthTable> e = LoadTruth(dir.File("t5"));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find(":10: bad feature line"), std::string::npos);
  EXPECT_NE(e.status().message().find("4 vector entries"), std::string::npos);
  EXPECT_FALSE(LoadTruth(dir.File("missing")).ok());
}

// What the reader must produce for sample s written in `format`.
void ExpectSample(const Generator& g, Format format, const GenSample& s, const Batch& b, size_t i) {
  const GenOptions& o = g.options();
  ASSERT_EQ(b.labels[i], s.label);
  std::vector<uint64_t> ids;
  std::vector<uint32_t> fields;
  std::vector<float> values;
  if (o.layout == Layout::kText) {
    for (size_t w = 0; w < s.words.size(); ++w) {
      ids.push_back(HashIndex(0, s.words[w] + uint64_t{1}, 0));
      fields.push_back(0);
      values.push_back(s.word_values[w]);
    }
  } else if (format == Format::kCriteo) {
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

// Generates o, reads the training file back with o's format and checks every sample against a
// fresh generator, which replays the same training stream.
void ExpectReadBack(const GenOptions& o) {
  ASSERT_TRUE(Generate(o).ok());
  ReaderOptions ro;
  ro.format = o.format;
  ro.files = {o.out};
  ro.strict = true;
  Result<Batch> b = testing::OpenAndReadAll(ro, 64);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_EQ(b->size(), o.samples);
  auto g = Generator::Create(o);
  ASSERT_TRUE(g.ok());
  GenSample s;
  for (size_t i = 0; i < o.samples; ++i) {
    (*g)->NextTrain(&s);
    ExpectSample(**g, o.format, s, *b, i);
    if (::testing::Test::HasFailure()) return;
  }
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
      ExpectReadBack(o);
      if (HasFailure()) return;
    }
  }
}

TEST(Gen, TextRoundTripsThroughTheReaders) {
  for (Format format : {Format::kLibsvm, Format::kLibffm}) {
    TempDir dir;
    GenOptions o = SmallText(dir);
    o.samples = 300;
    o.test_samples = 0;
    o.test_out.clear();
    o.format = format;
    o.gzip = format == Format::kLibffm;
    ExpectReadBack(o);
    if (HasFailure()) return;
  }
}

// The LIBSVM text as LIBLINEAR sees it: 1-based strictly ascending indices, unit-norm rows.
TEST(Gen, TextLinesHaveAscendingOneBasedIndicesAndUnitNorm) {
  TempDir dir;
  GenOptions o = SmallText(dir);
  o.test_samples = 0;
  o.test_out.clear();
  ASSERT_TRUE(Generate(o).ok());
  const std::string text = ReadFile(o.out);
  size_t lines = 0, pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    ASSERT_NE(end, std::string::npos);
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++lines;
    ASSERT_TRUE(line[0] == '0' || line[0] == '1');
    uint64_t last = 0;
    double squares = 0;
    size_t at = 1, features = 0;
    while (at < line.size()) {
      ASSERT_EQ(line[at], ' ');
      const size_t colon = line.find(':', at), next = std::min(line.find(' ', at + 1), line.size());
      uint64_t index = 0;
      float value = 0;
      std::from_chars(line.data() + at + 1, line.data() + colon, index);
      std::from_chars(line.data() + colon + 1, line.data() + next, value);
      ASSERT_GT(index, last) << line;
      ASSERT_LE(index, o.vocab);
      ASSERT_GT(value, 0.0f);
      last = index;
      squares += double{value} * value;
      ++features;
      at = next;
    }
    ASSERT_GE(features, 1u);
    ASSERT_NEAR(squares, 1.0, 1e-5) << line;
  }
  EXPECT_EQ(lines, o.samples);
}

TEST(Gen, TextLengthsVaryAroundTheMeanAndWordsFollowZipf) {
  TempDir dir;
  GenOptions o = SmallText(dir);
  o.vocab = 50000;  // a tail too long for 240k tokens to cover
  auto g = Generator::Create(o);
  ASSERT_TRUE(g.ok());
  std::vector<uint64_t> tokens_of(o.vocab, 0), docs_with(o.vocab, 0);
  uint64_t total = 0, shortest = ~uint64_t{0}, longest = 0;
  const int docs = 4000;
  GenSample s;
  for (int i = 0; i < docs; ++i) {
    (*g)->NextTrain(&s);
    ASSERT_EQ(s.words.size(), s.word_counts.size());
    ASSERT_EQ(s.words.size(), s.word_values.size());
    ASSERT_TRUE(std::is_sorted(s.words.begin(), s.words.end()));
    ASSERT_EQ(std::adjacent_find(s.words.begin(), s.words.end()), s.words.end());
    uint64_t length = 0;
    double squares = 0;
    for (size_t w = 0; w < s.words.size(); ++w) {
      length += s.word_counts[w];
      tokens_of[s.words[w]] += s.word_counts[w];
      docs_with[s.words[w]]++;
      squares += double{s.word_values[w]} * s.word_values[w];
    }
    ASSERT_NEAR(squares, 1.0, 1e-5);
    total += length;
    shortest = std::min(shortest, length);
    longest = std::max(longest, length);
  }
  // Log-normal lengths around --words: the mean close to it, an order of magnitude of spread.
  EXPECT_NEAR(static_cast<double>(total) / docs, 60.0, 4.0);
  EXPECT_LE(shortest, 10u);
  EXPECT_GE(longest, 300u);
  // Zipf(1.1) over the words: P(1)/P(2) = 2^1.1 ~ 2.14, and frequency falls with rank.
  EXPECT_NEAR(static_cast<double>(tokens_of[0]) / tokens_of[1], 2.14, 0.15);
  EXPECT_GT(docs_with[0], docs_with[9]);
  EXPECT_GT(docs_with[9], docs_with[99]);
  EXPECT_GT(docs_with[99], docs_with[999]);
  // Coverage: every one of the 100 most frequent words occurs; most of the rarest never do
  // (P(rank 50000) ~ 1e-6 per token: ~0.25 expected occurrences).
  EXPECT_EQ(std::count(docs_with.begin(), docs_with.begin() + 100, 0u), 0);
  const auto unseen_tail = std::count(docs_with.end() - 1000, docs_with.end(), 0u);
  EXPECT_GT(unseen_tail, 500);
}

TEST(Gen, TextIsDeterministicAndCalibrated) {
  TempDir dir;
  GenOptions o = SmallText(dir);
  Result<GenSummary> s = Generate(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_GT(s->bayes_auc, 0.75);
  EXPECT_LT(s->bayes_auc, 0.90);
  EXPECT_GT(s->test_positive_rate, 0.15);
  EXPECT_LT(s->test_positive_rate, 0.40);
  EXPECT_EQ(s->total_vocab, 2000u);
  EXPECT_NEAR(s->mean_tokens, 60.0, 6.0);
  EXPECT_GT(s->mean_features, 10.0);
  EXPECT_LT(s->mean_features, s->mean_tokens);
  const std::string a = ReadFile(o.out), at = ReadFile(o.test_out);
  o.out = dir.File("again");
  o.test_out = dir.File("again-test");
  ASSERT_TRUE(Generate(o).ok());
  EXPECT_EQ(ReadFile(o.out), a);
  EXPECT_EQ(ReadFile(o.test_out), at);
  o.samples = 2500;  // more training documents leave the test set alone
  ASSERT_TRUE(Generate(o).ok());
  EXPECT_EQ(ReadFile(o.test_out), at);
  o.seed = 24;
  ASSERT_TRUE(Generate(o).ok());
  EXPECT_NE(ReadFile(o.out).substr(0, a.size()), a);
}

TEST(Gen, LogitSdMovesTheBayesAucAndPositiveRateIsHit) {
  for (Layout layout : {Layout::kCtr, Layout::kText}) {
    TempDir dir;
    double last_auc = 0;
    for (double sd : {0.5, 1.5, 4.0}) {
      GenOptions o = layout == Layout::kText ? SmallText(dir) : Small(dir, Truth::kFfm);
      o.logit_sd = sd;
      Result<GenSummary> s = Generate(o);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      EXPECT_GT(s->bayes_auc, last_auc + 0.05) << LayoutName(layout) << " sd " << sd;
      last_auc = s->bayes_auc;
    }
    EXPECT_GT(last_auc, 0.93) << LayoutName(layout);
    GenOptions o = layout == Layout::kText ? SmallText(dir) : Small(dir);
    o.positive_rate = 0.05;
    Result<GenSummary> s = Generate(o);
    ASSERT_TRUE(s.ok());
    EXPECT_NEAR(s->test_positive_rate, 0.05, 0.015) << LayoutName(layout);
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
  EXPECT_EQ(ParseLayout("poem").ok(), false);
  EXPECT_EQ(*ParseTruth("ffm"), Truth::kFfm);
  EXPECT_EQ(*ParseLayout("text"), Layout::kText);
  // Flags whose Status names them.
  const auto expect_error = [&](const GenOptions& bad, const std::string& flag) {
    Result<GenSummary> r = Generate(bad);
    ASSERT_FALSE(r.ok()) << flag;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << flag;
    EXPECT_NE(r.status().message().find(flag), std::string::npos) << r.status().message();
  };
  for (double sd : {0.0, -1.0, 10.5, std::nan("")}) {
    o = Small(dir);
    o.logit_sd = sd;
    expect_error(o, "--logit-sd");
  }
  for (double rate : {0.0, 1.0, -0.1, std::nan("")}) {
    o = Small(dir);
    o.positive_rate = rate;
    expect_error(o, "--positive-rate");
  }
  o = SmallText(dir);
  o.format = Format::kCriteo;
  expect_error(o, "--format criteo has no text layout");
  o = SmallText(dir);
  o.truth = Truth::kFm;
  expect_error(o, "--layout text supports --truth lr");
  o = SmallText(dir);
  o.numeric = 2;
  expect_error(o, "--numeric");
  o = SmallText(dir);
  o.words = 0;
  expect_error(o, "--words");
  o = SmallText(dir);
  o.vocab = 0;
  expect_error(o, "--vocab");
}

}  // namespace
}  // namespace ferry::models
