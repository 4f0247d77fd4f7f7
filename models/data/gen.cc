// Generator: options, the sample streams (Zipf values and count-valued numerics, or text
// documents; labels) and line formatting. Generate() is in gen_run.cc.
#include <algorithm>
#include <charconv>
#include <cmath>

#include "models/data/gen_internal.h"

namespace ferry::models {

using internal::Mix64;

Result<Truth> ParseTruth(std::string_view name) {
  if (name == "lr") return Truth::kLr;
  if (name == "fm") return Truth::kFm;
  if (name == "ffm") return Truth::kFfm;
  if (name == "mlp") return Truth::kMlp;
  return InvalidArgument("unknown truth model '" + std::string(name) +
                         "'; expected lr, fm, ffm or mlp");
}

std::string_view TruthName(Truth truth) {
  switch (truth) {
    case Truth::kLr:
      return "lr";
    case Truth::kFm:
      return "fm";
    case Truth::kFfm:
      return "ffm";
    case Truth::kMlp:
      return "mlp";
  }
  return "unknown";
}

Result<Layout> ParseLayout(std::string_view name) {
  if (name == "ctr") return Layout::kCtr;
  if (name == "text") return Layout::kText;
  return InvalidArgument("unknown layout '" + std::string(name) + "'; expected ctr or text");
}

std::string_view LayoutName(Layout layout) {
  return layout == Layout::kText ? "text" : "ctr";
}

std::string CriteoToken(uint32_t field, uint32_t value) {
  // Each step is a bijection on 32-bit integers (xor, odd multiply, xorshift).
  uint32_t x = value ^ (0x5bd1e995u * (field + 1));
  x *= 0x9E3779B1u;
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  static const char kHex[] = "0123456789abcdef";
  std::string t(8, '0');
  for (int i = 7; i >= 0; --i, x >>= 4) t[i] = kHex[x & 15];
  return t;
}

namespace internal {

// helper1(x) = log1p(x) / x and helper2(x) = expm1(x) / x, with series near 0 (Commons RNG).
static double Helper1(double x) {
  return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x));
}
static double Helper2(double x) {
  return std::abs(x) > 1e-8 ? std::expm1(x) / x
                            : 1 + x * 0.5 * (1 + x * (1.0 / 3) * (1 + 0.25 * x));
}

ZipfSampler::ZipfSampler(uint64_t n, double s) : n_(n), s_(s) {
  h_x1_ = HIntegral(1.5) - 1.0;
  h_n_ = HIntegral(static_cast<double>(n) + 0.5);
  threshold_ = 2.0 - HIntegralInverse(HIntegral(2.5) - H(2.0));
}

double ZipfSampler::HIntegral(double x) const {
  const double lx = std::log(x);
  return Helper2((1.0 - s_) * lx) * lx;
}

double ZipfSampler::HIntegralInverse(double x) const {
  double t = x * (1.0 - s_);
  if (t < -1.0) t = -1.0;  // numerical guard at the end of the range
  return std::exp(Helper1(t) * x);
}

uint64_t ZipfSampler::Sample(Rng* rng) const {
  if (s_ == 0.0) return 1 + static_cast<uint64_t>(rng->Uniform() * static_cast<double>(n_));
  while (true) {
    const double u = h_n_ + rng->Uniform() * (h_x1_ - h_n_);
    const double x = HIntegralInverse(u);
    double k = std::floor(x + 0.5);
    if (k < 1) k = 1;
    if (k > static_cast<double>(n_)) k = static_cast<double>(n_);
    if (k - x <= threshold_ || u >= HIntegral(k + 0.5) - H(k)) return static_cast<uint64_t>(k);
  }
}

}  // namespace internal

struct Generator::Stream {
  internal::Rng rng;
  std::vector<internal::ZipfSampler> zipf;  // per field; text: the one over words
  std::vector<uint32_t> tokens;             // text: the document being drawn
  std::vector<double> scratch;              // text: tf-idf before normalisation
};

namespace {

// Text document lengths: log-normal with this sigma (the 10th and 90th percentiles a factor
// e^(2 * 1.2816 * 0.9) = 10 apart), mu such that the mean is --words; at least 1 token, at most
// kMaxLengthFactor times the mean (beyond 4 sigma: it bounds the work per document).
constexpr double kLengthSigma = 0.9;
constexpr double kMaxLengthFactor = 30;
constexpr uint64_t kMaxWords = 100000;

Status CheckTextOptions(const GenOptions& o) {
  if (o.format == Format::kCriteo) {
    return InvalidArgument(
        "--format criteo has no text layout: use --format libsvm or libffm with --layout text");
  }
  if (o.truth != Truth::kLr) {
    return InvalidArgument("--layout text supports --truth lr (got --truth " +
                           std::string(TruthName(o.truth)) + ")");
  }
  if (o.numeric != 0) return InvalidArgument("--layout text has no --numeric features");
  if (o.words == 0 || o.words > kMaxWords) {
    return InvalidArgument("--words (mean tokens per document) must be in 1..100000");
  }
  return Status::Ok();
}

// The id space of a field in a drifting stream (gen.h): 2^24, or the largest power of two S
// with fields S + numeric < 2^32 when there are more than 255 fields.
uint64_t DriftIdSpace(uint32_t fields, uint32_t numeric) {
  uint64_t space = uint64_t{1} << 24;
  while (space > 1 && fields * space + numeric >= (uint64_t{1} << 32)) space /= 2;
  return space;
}

Status CheckDriftOptions(const GenOptions& o, const std::vector<uint64_t>& vocab) {
  if (!(o.drift >= 0 && o.drift <= 1)) {
    return InvalidArgument("--drift must be in [0, 1] (the fraction of values replaced per epoch)");
  }
  if (o.drift_every == 0) return InvalidArgument("--drift-every must be at least 1");
  if (o.drift == 0) return Status::Ok();
  if (o.layout != Layout::kCtr) return InvalidArgument("--drift applies to --layout ctr only");
  const uint64_t space = DriftIdSpace(o.fields, o.numeric);
  for (uint64_t v : vocab) {
    if (v > space / 2) {
      return InvalidArgument("--drift needs at most " + std::to_string(space / 2) +
                             " values per field (--vocab / --features): a field's ids live in " +
                             std::to_string(space) + " indices");
    }
  }
  return Status::Ok();
}

Status CheckOptions(const GenOptions& o) {
  if (o.layout != Layout::kCtr && o.layout != Layout::kText) {
    return InvalidArgument("--layout must be ctr or text");
  }
  if (o.layout == Layout::kText) FERRY_RETURN_IF_ERROR(CheckTextOptions(o));
  if (o.fields == 0 || o.fields > 1000) return InvalidArgument("--fields must be in 1..1000");
  if (o.features == 0 && (o.vocab == 0 || o.vocab > (uint64_t{1} << 32))) {
    return InvalidArgument("--vocab must be in 1..2^32");
  }
  if (o.features != 0 && (o.features < o.fields || o.features / o.fields >= (uint64_t{1} << 32))) {
    return InvalidArgument("--features must be at least --fields and at most 2^32 per field");
  }
  if (!(o.zipf >= 0 && o.zipf <= 10)) return InvalidArgument("--zipf must be in 0..10");
  if (o.numeric > 1000) return InvalidArgument("--numeric must be in 0..1000");
  if (o.factors == 0 || o.factors > 64) return InvalidArgument("--factors must be in 1..64");
  if (o.hidden == 0 || o.hidden > 256) return InvalidArgument("--hidden must be in 1..256");
  if (!(o.logit_sd > 0 && o.logit_sd <= 10)) {
    return InvalidArgument("--logit-sd must be in (0, 10] (1.5: Bayes AUC about 0.82)");
  }
  if (!(o.positive_rate > 0 && o.positive_rate < 1)) {
    return InvalidArgument("--positive-rate must be strictly between 0 and 1");
  }
  if (o.format == Format::kCriteo &&
      (o.fields != kCriteoCatColumns || o.numeric != kCriteoIntColumns)) {
    return InvalidArgument(
        "criteo output has 26 categorical and 13 numeric fields: use "
        "--fields 26 --numeric 13 (the defaults with --format criteo)");
  }
  return Status::Ok();
}

// Count-valued numeric feature: log-normal, floored (about a quarter are 0), capped.
uint32_t DrawCount(internal::Rng* rng) {
  const double x = std::floor(std::exp(1.0 + 1.5 * rng->Normal()));
  return static_cast<uint32_t>(std::min(x, 1e7));
}

void PutU64(std::string* out, uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out->append(buf, static_cast<size_t>(r.ptr - buf));
}

void PutFloat(std::string* out, float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest: parses back exactly
  out->append(buf, static_cast<size_t>(r.ptr - buf));
}

}  // namespace

Generator::Generator(const GenOptions& options) : options_(options) {}
Generator::~Generator() = default;

Result<std::unique_ptr<Generator>> Generator::Create(const GenOptions& given) {
  GenOptions options = given;
  // A text vocabulary is one field: --features, if given, is its size.
  if (options.layout == Layout::kText) options.fields = 1;
  FERRY_RETURN_IF_ERROR(CheckOptions(options));
  std::unique_ptr<Generator> g(new Generator(options));
  const uint32_t fields = options.fields;
  g->offsets_.assign(1, 0);
  for (uint32_t f = 0; f < fields; ++f) {
    const uint64_t v = options.features == 0
                           ? options.vocab
                           : options.features / fields + (f < options.features % fields ? 1 : 0);
    g->vocab_.push_back(v);
    g->offsets_.push_back(g->offsets_.back() + v);
    g->id_space_ = std::max(g->id_space_, v);
  }
  FERRY_RETURN_IF_ERROR(CheckDriftOptions(options, g->vocab_));
  if (options.drift > 0) {
    g->id_space_ = DriftIdSpace(fields, options.numeric);
    for (uint32_t f = 0; f <= fields; ++f) g->offsets_[f] = f * g->id_space_;
    for (uint64_t v : g->vocab_) {
      const auto r = static_cast<uint64_t>(std::llround(options.drift * static_cast<double>(v)));
      g->retire_.push_back(std::clamp<uint64_t>(r, 1, v));
    }
  }
  g->model_ = std::make_unique<Model>(options);
  const auto make_stream = [&](uint64_t salt) {
    auto s = std::make_unique<Stream>();
    s->rng.state = Mix64(options.seed ^ salt);
    for (uint32_t f = 0; f < fields; ++f) s->zipf.emplace_back(g->vocab_[f], options.zipf);
    return s;
  };
  // Calibrate on a sample of the data distribution drawn from a stream of its own.
  auto calibration = make_stream(0x63616c);
  std::vector<double> raws(20000);
  GenSample s;
  for (double& r : raws) {
    g->Draw(calibration.get(), &s, /*label=*/false);
    r = g->model_->Raw(s);
  }
  g->model_->Calibrate(raws);
  g->train_ = make_stream(0x747261696e);
  g->test_ = make_stream(0x74657374);
  return g;
}

void Generator::DrawDocument(Stream* stream, GenSample* s) const {
  const double mean = static_cast<double>(options_.words);
  const double mu = std::log(mean) - 0.5 * kLengthSigma * kLengthSigma;
  const double length = std::round(std::exp(mu + kLengthSigma * stream->rng.Normal()));
  const auto tokens = static_cast<size_t>(std::clamp(length, 1.0, kMaxLengthFactor * mean));
  std::vector<uint32_t>& t = stream->tokens;
  t.resize(tokens);
  for (uint32_t& w : t) w = static_cast<uint32_t>(stream->zipf[0].Sample(&stream->rng) - 1);
  std::sort(t.begin(), t.end());
  s->words.clear();
  s->word_counts.clear();
  for (size_t i = 0; i < tokens;) {
    size_t j = i + 1;
    while (j < tokens && t[j] == t[i]) ++j;
    s->words.push_back(t[i]);
    s->word_counts.push_back(static_cast<uint32_t>(j - i));
    i = j;
  }
  // tf-idf, as text sets (rcv1) are prepared: a word's idf is -ln of its Zipf probability,
  // ln(rank^s H) = s ln(rank) + ln H (H the normaliser, which only shifts every idf alike).
  std::vector<double>& v = stream->scratch;
  v.resize(s->words.size());
  double squares = 0;
  for (size_t i = 0; i < s->words.size(); ++i) {
    const double idf = 1.0 + options_.zipf * std::log(static_cast<double>(s->words[i]) + 1.0);
    v[i] = s->word_counts[i] * idf;
    squares += v[i] * v[i];
  }
  const double inv_norm = 1.0 / std::sqrt(squares);
  s->word_values.resize(s->words.size());
  for (size_t i = 0; i < s->words.size(); ++i) {
    // Rounded to float here, so the truth scores exactly the value the file holds.
    s->word_values[i] = static_cast<float>(v[i] * inv_norm);
  }
}

void Generator::Draw(Stream* stream, GenSample* s, bool label) const {
  if (options_.layout == Layout::kText) {
    s->values.clear();
    s->counts.clear();
    DrawDocument(stream, s);
  } else {
    s->words.clear();
    s->word_counts.clear();
    s->word_values.clear();
    s->values.resize(options_.fields);
    for (uint32_t f = 0; f < options_.fields; ++f) {
      s->values[f] = static_cast<uint32_t>(stream->zipf[f].Sample(&stream->rng) - 1);
    }
    s->counts.resize(options_.numeric);
    for (uint32_t k = 0; k < options_.numeric; ++k) s->counts[k] = DrawCount(&stream->rng);
    if (!retire_.empty()) DriftIds(s);
  }
  if (!label) return;
  s->logit = model_->Logit(*s);
  const double p = 1.0 / (1.0 + std::exp(-s->logit));
  s->label = stream->rng.Uniform() < p ? 1.0f : 0.0f;
}

void Generator::DriftIds(GenSample* s) const {
  // id = (base + vocab - 1 - rank) mod S with base = epoch R mod S; S is a power of two, so the
  // products below are taken mod S first and stay far from overflow (S, R <= 2^24).
  const uint64_t mask = id_space_ - 1;
  for (uint32_t f = 0; f < options_.fields; ++f) {
    const uint64_t base = ((s->epoch & mask) * retire_[f]) & mask;
    s->values[f] = static_cast<uint32_t>((base + vocab_[f] - 1 - s->values[f]) & mask);
  }
}

void Generator::NextTrain(GenSample* s) {
  s->epoch = retire_.empty() ? 0 : train_drawn_ / options_.drift_every;
  ++train_drawn_;
  Draw(train_.get(), s, true);
}
void Generator::NextTest(GenSample* s) {
  s->epoch = 0;
  Draw(test_.get(), s, true);
}
uint64_t Generator::total_vocab() const {
  uint64_t total = 0;
  for (uint64_t v : vocab_) total += v;
  return total;
}
double Generator::Logit(const GenSample& s) const {
  return model_->Logit(s);
}
double Generator::bias() const {
  return model_->bias();
}
double Generator::scale() const {
  return model_->scale();
}

Status Generator::WriteTruth(const std::string& path) const {
  return model_->Write(path, vocab_);
}

void Generator::AppendLine(Format format, const GenSample& s, std::string* out) const {
  out->push_back(s.label > 0.5f ? '1' : '0');
  const uint32_t fields = options_.fields;
  const bool text = options_.layout == Layout::kText;
  if (format == Format::kCriteo && !text) {
    for (uint32_t k = 0; k < options_.numeric; ++k) {
      out->push_back('\t');
      PutU64(out, s.counts[k]);
    }
    for (uint32_t f = 0; f < fields; ++f) {
      out->push_back('\t');
      out->append(CriteoToken(f, s.values[f]));
    }
    out->push_back('\n');
    return;
  }
  const bool ffm = format == Format::kLibffm;
  if (text) {
    for (size_t i = 0; i < s.words.size(); ++i) {
      out->append(ffm ? " 0:" : " ");
      PutU64(out, FeatureIndex(0, s.words[i]));
      out->push_back(':');
      PutFloat(out, s.word_values[i]);
    }
    out->push_back('\n');
    return;
  }
  for (uint32_t f = 0; f < fields; ++f) {
    out->push_back(' ');
    if (ffm) {
      PutU64(out, f);
      out->push_back(':');
    }
    PutU64(out, FeatureIndex(f, s.values[f]));
    out->append(":1");
  }
  for (uint32_t k = 0; k < options_.numeric; ++k) {
    if (s.counts[k] == 0) continue;  // value ln(1 + 0) = 0: sparse formats leave it out
    out->push_back(' ');
    if (ffm) {
      PutU64(out, fields + k);
      out->push_back(':');
    }
    PutU64(out, NumericIndex(k));
    out->push_back(':');
    PutFloat(out, static_cast<float>(std::log1p(s.counts[k])));
  }
  out->push_back('\n');
}

}  // namespace ferry::models
