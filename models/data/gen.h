// Synthetic CTR data with a known ("hidden") truth model: the library behind ferry-gen, also
// called directly by tests.
//
//   GenOptions o;
//   o.samples = 1000000; o.test_samples = 100000;
//   o.out = "train.svm"; o.test_out = "test.svm"; o.truth_out = "truth.txt";
//   o.truth = Truth::kFm; o.seed = 7;
//   FERRY_ASSIGN_OR_RETURN(GenSummary s, Generate(o));   // s.bayes_auc: the best any model can do
//
// A sample has one value in each of `fields` categorical fields (Zipf(zipf) over the field's
// values, value 0 the most frequent) and `numeric` count-valued features. Its label is drawn
// Bernoulli(sigmoid(logit)) where logit comes from the truth model:
//   lr:  bias + sum_f w[f][v_f] + sum_k a_k ln(1 + x_k)
//   fm:  lr + sum_{f<g} <u[f][v_f], u[g][v_g]>                 (factors-long vectors)
//   mlp: bias + sum_h c_h tanh(b_h + sum_i W_hi e_i) + sum_k a_k ln(1 + x_k), e = the
//        concatenated per-field embeddings e[f][v_f] (factors-long): not linear in any feature
//        encoding and not pairwise, so LR and FM can only approximate it.
// Parameters are drawn from (approximately) normal distributions and scaled so that the
// Bayes-optimal AUC is about 0.8 and the positive rate about 25%. They are computed on demand
// from the seed (no tables), so memory stays small whatever the vocabulary.
//
// Outputs (streamed, bounded memory; gzip at level 1 with gzip = true):
//   libsvm  "1 17:1 1042:1 ... 26001:1.609438"   index = offset(f) + v + 1, offset(f) = sum of
//           the vocabularies of fields < f; numeric feature k has index total_vocab + k + 1 and
//           value ln(1 + x_k), left out when x_k = 0. 1-based and ascending, so LIBLINEAR
//           reads it.
//   libffm  "1 0:17:1 1:1042:1 ... 26:26001:1.609438"   field:index:value, numeric fields F + k.
//   criteo  label, 13 counts x_k, 26 tokens CriteoToken(f, v) (8 hex digits), tab separated;
//           needs fields = 26 and numeric = 13.
// Determinism: the same options (apart from file names) give the same bytes. Train and test
// samples come from separate streams, so --samples does not change the test set.
// Thread-safety: a Generator is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/data/parse.h"
#include "transport/status.h"

namespace ferry::models {

enum class Truth { kLr, kFm, kMlp };
Result<Truth> ParseTruth(std::string_view name);  // "lr" | "fm" | "mlp"
std::string_view TruthName(Truth truth);

struct GenOptions {
  uint64_t samples = 0;       // training samples (>= 1)
  uint64_t test_samples = 0;  // held-out samples, written to test_out
  uint32_t fields = 26;       // categorical fields, 1..1000
  uint64_t vocab = 1000;      // values per field, 1..2^32
  uint64_t features = 0;      // > 0: total values over all fields (overrides vocab; the first
                              // features % fields fields get one value more)
  double zipf = 1.1;          // Zipf exponent of value frequencies (0: uniform), 0..10
  uint32_t numeric = 0;       // count-valued features, 0..1000
  Truth truth = Truth::kLr;
  uint32_t factors = 4;  // fm: factor length; mlp: embedding length (1..64)
  uint32_t hidden = 16;  // mlp: hidden units (1..256)
  Format format = Format::kLibsvm;
  std::string out;        // training file (required)
  std::string test_out;   // required iff test_samples > 0
  std::string truth_out;  // optional: the truth model, text (format in docs/data-formats.md)
  bool gzip = false;
  uint64_t seed = 1;
};

// One generated sample.
struct GenSample {
  float label = 0;
  double logit = 0;              // of the truth model; p = sigmoid(logit)
  std::vector<uint32_t> values;  // per categorical field, 0-based (0 = most frequent)
  std::vector<uint32_t> counts;  // per numeric feature
};

struct GenSummary {
  uint64_t samples = 0, test_samples = 0;
  double positive_rate = 0;       // of the training labels
  double test_positive_rate = 0;  // of the test labels (0 without a test set)
  // The truth model scored on the test set (the training set when there is none): the
  // Bayes-optimal logloss and AUC, the yardstick for any learned model.
  double bayes_logloss = 0;
  double bayes_auc = 0;
  bool on_test = false;      // whether the two above are on the test set
  double bias = 0;           // truth model's bias after calibration
  double scale = 0;          // factor the raw parameters were scaled by
  uint64_t total_vocab = 0;  // distinct categorical values over all fields
};

class Generator {
 public:
  // Validates the options (InvalidArgument naming the flag) and calibrates the truth model.
  static Result<std::unique_ptr<Generator>> Create(const GenOptions& options);
  ~Generator();

  void NextTrain(GenSample* s);  // the training stream
  void NextTest(GenSample* s);   // the independent test stream

  // Appends the sample as one line (with '\n') in options().format / any format.
  void AppendLine(const GenSample& s, std::string* out) const {
    AppendLine(options_.format, s, out);
  }
  void AppendLine(Format format, const GenSample& s, std::string* out) const;

  uint64_t vocab(uint32_t field) const { return vocab_[field]; }
  uint64_t total_vocab() const { return offsets_.back(); }
  // 1-based LIBSVM index of value v of field f, and of numeric feature k.
  uint64_t FeatureIndex(uint32_t field, uint32_t value) const {
    return offsets_[field] + value + 1;
  }
  uint64_t NumericIndex(uint32_t k) const { return total_vocab() + k + 1; }

  double Logit(const GenSample& s) const;  // the truth model
  // Writes the truth model as text (never gzip; docs/data-formats.md has the format).
  Status WriteTruth(const std::string& path) const;
  const GenOptions& options() const { return options_; }
  double bias() const;
  double scale() const;

  class Model;  // gen_truth.cc

 private:
  explicit Generator(const GenOptions& options);
  struct Stream;
  // Draws values and counts; with label also the logit and the label.
  void Draw(Stream* stream, GenSample* s, bool label) const;

  GenOptions options_;
  std::vector<uint64_t> vocab_;
  std::vector<uint64_t> offsets_;  // fields + 1 prefix sums of vocab_
  std::unique_ptr<Model> model_;
  std::unique_ptr<Stream> train_, test_;
};

// Criteo C-column token of value v in field f: 8 lowercase hex digits of a bijection of v, so
// distinct values never share a token.
std::string CriteoToken(uint32_t field, uint32_t value);

// Generates the files and returns the summary. Errors name the file or the option.
Result<GenSummary> Generate(const GenOptions& options);

// A truth file read back (docs/data-formats.md). Scores GenSamples like Generator::Logit, so a
// test can check the file, and a trainer can compare its learned weights with the truth.
struct TruthTable {
  Truth kind = Truth::kLr;
  uint32_t fields = 0, numeric = 0, factors = 0, hidden = 0;
  std::vector<uint64_t> vocab;    // per field
  std::vector<uint64_t> offsets;  // fields + 1 prefix sums
  double bias = 0;
  std::vector<double> numeric_weight;           // numeric
  std::vector<double> weight;                   // lr, fm: per value, at offsets[f] + v
  std::vector<double> vectors;                  // fm factors / mlp embeddings: factors per value
  std::vector<double> hidden_bias, out_weight;  // mlp: hidden
  std::vector<double> in_weight;                // mlp: hidden x (fields * factors), row-major
  double Logit(const GenSample& s) const;
};
Result<TruthTable> LoadTruth(const std::string& path);

}  // namespace ferry::models
