// Generator streams (GenerateStream) and drift: without drift a stream is the training file,
// byte for byte; the same options give the same bytes; with drift fresh ids appear and old ones
// retire while the active set stays the same size, the truth moves so that the old truth scores
// the new data worse, and a stream whose reader goes away ends quietly.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <set>
#include <string>
#include <vector>

#include "models/data/gen.h"
#include "tests/data/data_test_util.h"

namespace ferry::models {
namespace {

using testing::ReadFile;
using testing::TempDir;

// 4 fields of 200 values and a numeric feature; drift 0.2 every 2000 samples (40 ids a field).
GenOptions Drifting(double drift = 0.2) {
  GenOptions o;
  o.fields = 4;
  o.vocab = 200;
  o.numeric = 1;
  o.drift = drift;
  o.drift_every = 2000;
  o.seed = 31;
  return o;
}

// The stream's bytes, through a file.
std::string StreamBytes(const TempDir& dir, const GenOptions& o, uint64_t samples) {
  const std::string path = dir.File("stream");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  EXPECT_GE(fd, 0) << path;
  Result<GenStreamSummary> s = GenerateStream(o, {.samples = samples, .fd = fd});
  ::close(fd);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (s.ok()) {
    EXPECT_EQ(s->samples, samples);
    EXPECT_FALSE(s->reader_closed);
  }
  return ReadFile(path);
}

// The categorical indices (below numeric_from) of each libsvm line.
std::vector<std::vector<uint64_t>> Indices(const std::string& text, uint64_t numeric_from) {
  std::vector<std::vector<uint64_t>> lines;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    std::vector<uint64_t>& ids = lines.emplace_back();
    for (size_t p = line.find(' '); p != std::string::npos; p = line.find(' ', p + 1)) {
      const uint64_t index = std::stoull(line.substr(p + 1));
      if (index < numeric_from) ids.push_back(index);
    }
  }
  return lines;
}

TEST(GenStream, WithoutDriftTheStreamIsTheTrainingFile) {
  TempDir dir;
  for (Format format : {Format::kLibsvm, Format::kLibffm}) {
    GenOptions o = Drifting(0);
    o.truth = Truth::kFm;
    o.format = format;
    o.samples = 3000;
    o.out = dir.File("train");
    ASSERT_TRUE(Generate(o).ok());
    const std::string file = ReadFile(o.out);
    EXPECT_EQ(StreamBytes(dir, o, 3000), file);
    EXPECT_EQ(std::count(file.begin(), file.end(), '\n'), 3000);
  }
}

TEST(GenStream, SameOptionsSameBytesOtherSeedOtherBytes) {
  TempDir dir;
  GenOptions o = Drifting();
  o.truth = Truth::kFfm;
  const std::string a = StreamBytes(dir, o, 5000);
  EXPECT_EQ(StreamBytes(dir, o, 5000), a);
  // A shorter stream is a prefix of a longer one.
  const std::string b = StreamBytes(dir, o, 3000);
  EXPECT_LT(b.size(), a.size());
  EXPECT_EQ(a.substr(0, b.size()), b);
  o.seed = 32;
  EXPECT_NE(StreamBytes(dir, o, 5000), a);
}

TEST(GenStream, DriftReplacesIdsAndKeepsTheActiveSetBounded) {
  TempDir dir;
  const GenOptions o = Drifting();
  auto g = Generator::Create(o);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const uint64_t space = (*g)->IdSpace();
  EXPECT_EQ(space, uint64_t{1} << 24);
  EXPECT_EQ((*g)->retired_per_epoch(0), 40u);
  EXPECT_EQ((*g)->FeatureIndex(2, 5), 2 * space + 6);
  EXPECT_EQ((*g)->NumericIndex(0), 4 * space + 1);
  // More than 255 fields: a smaller power of two, so every index fits in 32 bits.
  GenOptions wide = o;
  wide.fields = 300;
  wide.numeric = 10;
  auto w = Generator::Create(wide);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->IdSpace(), uint64_t{1} << 23);
  EXPECT_LT((*w)->NumericIndex(9), uint64_t{1} << 32);
  const auto lines = Indices(StreamBytes(dir, o, 20000), (*g)->NumericIndex(0));
  ASSERT_EQ(lines.size(), 20000u);
  // Windows of one epoch each: 4 fields x 200 active ids at most, and in field f's range.
  std::vector<std::set<uint64_t>> windows(10);
  std::set<uint64_t> all;
  for (size_t i = 0; i < lines.size(); ++i) {
    ASSERT_EQ(lines[i].size(), 4u) << i;
    for (uint32_t f = 0; f < 4; ++f) {
      EXPECT_GT(lines[i][f], f * space) << i;
      EXPECT_LE(lines[i][f], (f + 1) * space) << i;
    }
    windows[i / 2000].insert(lines[i].begin(), lines[i].end());
    all.insert(lines[i].begin(), lines[i].end());
  }
  for (size_t w = 0; w < windows.size(); ++w) {
    EXPECT_LE(windows[w].size(), 800u) << w;
    EXPECT_GT(windows[w].size(), windows[0].size() * 3 / 4) << w;  // roughly constant
    EXPECT_LT(windows[w].size(), windows[0].size() * 5 / 4) << w;
  }
  // Epoch 9's ids start 9 * 40 = 360 above epoch 0's: none in common. Neighbours share 160.
  size_t common_first_last = 0, common_neighbours = 0;
  for (uint64_t id : windows[9]) common_first_last += windows[0].count(id);
  for (uint64_t id : windows[1]) common_neighbours += windows[0].count(id);
  EXPECT_EQ(common_first_last, 0u);
  EXPECT_GT(common_neighbours, windows[0].size() / 2);
  EXPECT_GT(all.size(), 3 * windows[0].size());
  // The freshest ids are the most frequent: id base + 199 (rank 0) of the last epoch in field 0.
  size_t top = 0;
  for (size_t i = 18000; i < 20000; ++i) top += lines[i][0] == 9 * 40 + 199 + 1;
  EXPECT_GT(top, 2000u / 10);
}

TEST(GenStream, DriftMovesTheTruthSoTheOldTruthScoresWorse) {
  GenOptions o = Drifting(0.25);  // every id redrawn every 4 epochs
  o.zipf = 0;  // uniform: the samples weigh every id alike, so they count redrawn ids
  auto g = Generator::Create(o);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  GenSample s;
  double loss_new = 0, loss_old = 0;
  int changed_next = 0, changed_period = 0, n = 0;
  const auto loss = [](double logit, float label) {
    return std::log1p(std::exp(-std::abs(logit))) + std::max(logit, 0.0) - label * logit;
  };
  for (int i = 0; i < 8000; ++i) {
    (*g)->NextTrain(&s);  // epochs 0..3
    if (s.epoch != 1) continue;
    ++n;
    const double now = s.logit;
    EXPECT_DOUBLE_EQ((*g)->Logit(s), now);
    GenSample then = s;
    then.epoch = 0;
    const double old = (*g)->Logit(then);
    changed_next += old != now;
    then.epoch = 5;  // a whole period later: every id redrawn
    changed_period += (*g)->Logit(then) != now;
    loss_new += loss(now, s.label);
    loss_old += loss(old, s.label);
  }
  ASSERT_EQ(n, 2000);
  // P(none of 4 ids redrawn) = 0.75^4 ~ 0.32.
  EXPECT_GT(changed_next, n / 2);
  EXPECT_LT(changed_next, n * 85 / 100);
  EXPECT_EQ(changed_period, n);
  EXPECT_GT(loss_old / n, loss_new / n + 0.02) << loss_old / n << " vs " << loss_new / n;
}

TEST(GenStream, AClosedReaderEndsTheStreamQuietly) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[0]);
  const auto previous = std::signal(SIGPIPE, SIG_IGN);
  Result<GenStreamSummary> s = GenerateStream(Drifting(), {.samples = 0, .fd = fds[1]});  // endless
  std::signal(SIGPIPE, previous);
  ::close(fds[1]);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->reader_closed);
  EXPECT_EQ(s->samples, 0u);
}

TEST(GenStream, OptionErrorsNameTheFlag) {
  TempDir dir;
  const auto stream_error = [&](const GenOptions& o, const GenStreamOptions& so,
                                const std::string& flag) {
    Result<GenStreamSummary> r = GenerateStream(o, so);
    ASSERT_FALSE(r.ok()) << flag;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << flag;
    EXPECT_NE(r.status().message().find(flag), std::string::npos) << r.status().message();
  };
  GenOptions o = Drifting(1.5);
  stream_error(o, {.samples = 1}, "--drift must be in [0, 1]");
  o = Drifting();
  o.drift_every = 0;
  stream_error(o, {.samples = 1}, "--drift-every");
  o = Drifting();
  o.layout = Layout::kText;
  o.numeric = 0;
  stream_error(o, {.samples = 1}, "--drift applies to --layout ctr only");
  o = Drifting();
  o.vocab = (uint64_t{1} << 23) + 1;
  stream_error(o, {.samples = 1}, "--drift needs at most 8388608 values per field");
  stream_error(Drifting(), {.samples = 1, .rate = -1}, "--rate");
  o = Drifting();
  o.gzip = true;
  stream_error(o, {.samples = 1}, "gzip");
  o = Drifting();
  o.truth_out = dir.File("truth");
  stream_error(o, {.samples = 1}, "--truth-out");
  // Files with drift: no test set, no truth file.
  o = Drifting();
  o.samples = 10;
  o.out = dir.File("train");
  EXPECT_TRUE(Generate(o).ok());
  o.test_samples = 10;
  o.test_out = dir.File("test");
  EXPECT_FALSE(Generate(o).ok());
}

}  // namespace
}  // namespace ferry::models
