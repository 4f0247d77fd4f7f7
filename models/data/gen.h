// Synthetic training data with a known ("hidden") truth model: the library behind ferry-gen,
// also called directly by tests. Two layouts:
//
//   ctr   click-through rows: one value in each categorical field, plus count-valued numerics
//   text  bag-of-words documents: many distinct words per sample, tf-idf values of unit L2 norm
//
//   GenOptions o;
//   o.samples = 1000000; o.test_samples = 100000;
//   o.out = "train.svm"; o.test_out = "test.svm"; o.truth_out = "truth.txt";
//   o.truth = Truth::kFm; o.seed = 7;
//   FERRY_ASSIGN_OR_RETURN(GenSummary s, Generate(o));   // s.bayes_auc: the best any model can do
//
// ctr: a sample has one value in each of `fields` categorical fields (Zipf(zipf) over the
// field's values, value 0 the most frequent) and `numeric` count-valued features. Its label is
// drawn Bernoulli(sigmoid(logit)) where logit = bias + scale * (the truth model's score):
//   lr:  sum_f w[f][v_f] + sum_k a_k ln(1 + x_k)
//   fm:  lr + sum_{f<g} <u[f][v_f], u[g][v_g]>                 (factors-long vectors)
//   ffm: lr + sum_{f<g} <u[f][v_f][g], u[g][v_g][f]>           (libffm's model: one vector per
//        value and other field, drawn independently across the other field, so an FM, with one
//        vector per value, can only approximate it; O(F^2 k) per sample, fine for F <= ~40)
//   mlp: sum_h c_h tanh(b_h + sum_i W_hi e_i) + sum_k a_k ln(1 + x_k), e = the concatenated
//        per-field embeddings e[f][v_f] (factors-long): not linear in any feature encoding and
//        not pairwise, so LR and FM can only approximate it.
// text: a document of L tokens, L log-normal around `words` (at least 1), each token a word of
// the `vocab`-word vocabulary drawn Zipf(zipf) (word 0 the most frequent). The sample holds the
// distinct words with their term counts c_w and tf-idf values x_w = c_w idf_w / ||c idf||_2, idf_w
// = 1 + zipf ln(w + 1) (-ln of the word's Zipf probability up to a constant; unit L2 norm, as
// LIBSVM's rcv1 set is prepared). Truth lr only: score = sum_w beta_w x_w, beta_w heavy-tailed
// (a few percent of the fairly frequent words are strong "topic" words, the rest near 0;
// gen_truth.cc has the distribution): text classification that a linear model learns well from
// a few thousand documents.
// Parameters are computed on demand from the seed (no tables), so memory stays small whatever
// the vocabulary. Calibration picks scale so that the logits' standard deviation over the data
// is logit_sd (1.5: Bayes-optimal AUC about 0.82) and bias so that the mean click probability is
// positive_rate.
//
// Outputs (streamed, bounded memory; gzip at level 1 with gzip = true):
//   libsvm  "1 17:1 1042:1 ... 26001:1.609438"   index = offset(f) + v + 1, offset(f) = sum of
//           the vocabularies of fields < f; numeric feature k has index total_vocab + k + 1 and
//           value ln(1 + x_k), left out when x_k = 0. 1-based and ascending, so LIBLINEAR
//           reads it. text: "1 1:0.4472136 7:0.2236068 ..." word w at index w + 1.
//   libffm  "1 0:17:1 1:1042:1 ... 26:26001:1.609438"   field:index:value, numeric fields F + k.
//           text: every word in field 0.
//   criteo  label, 13 counts x_k, 26 tokens CriteoToken(f, v) (8 hex digits), tab separated;
//           needs fields = 26 and numeric = 13; ctr layout only.
// Determinism: the same options (apart from file names) give the same bytes. Train and test
// samples come from separate streams, so --samples does not change the test set.
//
// Streams (GenerateStream, ferry-gen --stream): the training stream written to a file
// descriptor, endless or bounded, optionally paced to a rate. With drift = 0 it is the training
// file's bytes. With drift D > 0 (ctr only) the data change over time, so that memory, eviction
// and adaptation can be tested: the stream is cut into epochs of drift_every samples, and at each
// epoch boundary
//   - vocabulary: R_f = max(1, round(D vocab_f)) values of each field retire and as many fresh,
//     never-seen ones start. The active ids of field f in epoch e are base .. base + vocab_f - 1,
//     base = e R_f (mod the field's id space), and Zipf rank r (0 = most frequent) is id
//     base + vocab_f - 1 - r: a fresh id enters as the most frequent value, each epoch it ages
//     R_f ranks down, and it retires from the tail as the least frequent, so old ids fade out
//     rather than vanish from the top. Active ids per field: always exactly vocab_f; ids seen
//     so far: vocab_f + e R_f, without bound.
//   - truth: every id's parameters (w, the fm/ffm vectors, the mlp embedding) are redrawn once
//     every P = round(1 / D) epochs, at an epoch offset hashed from (seed, field, id): at each
//     boundary about 1/P ~ D of the ids get new parameters (a fresh id's are drawn from the seed
//     like any other's). A model trained before a boundary scores worse after it (new ids it
//     has not seen, changed weights) and recovers with training. Bias, scale, the mlp's hidden
//     layer and the numeric weights stay put (calibration is done once, on epoch 0).
// Index layout with drift: field f's ids 0 .. S - 1 are the indices f S + 1 .. f S + S, S = 2^24
// (smaller powers of two when fields > 255: the largest with fields S + numeric < 2^32), so
// libsvm index = f S + id + 1, libffm field:index the same, numeric k at index fields S + k + 1
// (every index fits in 32 bits, no two fields share one); an id wraps
// within its field after S / R_f epochs (168 000 epochs with vocab 1000, D 0.1).
// Criteo tokens are CriteoToken(f, id). vocab_f must be at most S / 2. Memory does not grow
// with the stream: a drifted id is a pure function of (rank, epoch), its truth of (id, epoch).
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

enum class Truth { kLr, kFm, kFfm, kMlp };
Result<Truth> ParseTruth(std::string_view name);  // "lr" | "fm" | "ffm" | "mlp"
std::string_view TruthName(Truth truth);

enum class Layout { kCtr, kText };
Result<Layout> ParseLayout(std::string_view name);  // "ctr" | "text"
std::string_view LayoutName(Layout layout);

struct GenOptions {
  uint64_t samples = 0;       // training samples (>= 1)
  uint64_t test_samples = 0;  // held-out samples, written to test_out
  Layout layout = Layout::kCtr;
  uint32_t fields = 26;         // categorical fields, 1..1000; text: ignored (the vocabulary is one
                                // field, so Create sets it to 1 in options())
  uint64_t vocab = 1000;        // values per field, 1..2^32; text: words in the vocabulary
  uint64_t features = 0;        // > 0: total values over all fields (overrides vocab; the first
                                // features % fields fields get one value more)
  double zipf = 1.1;            // Zipf exponent of value / word frequencies (0: uniform), 0..10
  uint32_t numeric = 0;         // count-valued features, 0..1000; text: must be 0
  uint64_t words = 100;         // text: mean tokens per document, 1..100000
  Truth truth = Truth::kLr;     // text: lr only
  uint32_t factors = 4;         // fm, ffm: factor length; mlp: embedding length (1..64)
  uint32_t hidden = 16;         // mlp: hidden units (1..256)
  double logit_sd = 1.5;        // calibration: standard deviation of the logits, (0, 10]
  double positive_rate = 0.25;  // calibration: mean click probability, (0, 1)
  Format format = Format::kLibsvm;
  std::string out;        // training file (required)
  std::string test_out;   // required iff test_samples > 0
  std::string truth_out;  // optional: the truth model, text (format in docs/data-formats.md)
  bool gzip = false;
  uint64_t seed = 1;
  // Drift of the training stream (above): the fraction D of each field's values, and about D of
  // the ids' truth parameters, replaced every drift_every samples. 0 (no drift) or (0, 1]; ctr
  // only; no test set and no truth file with drift (the truth has no fixed value to hold out).
  double drift = 0;
  uint64_t drift_every = 100000;  // samples per drift epoch, >= 1
};

// One generated sample. ctr fills values and counts, text the three word vectors.
struct GenSample {
  float label = 0;
  double logit = 0;                   // of the truth model; p = sigmoid(logit)
  std::vector<uint32_t> values;       // per categorical field, 0-based (0 = most frequent)
  std::vector<uint32_t> counts;       // per numeric feature
  std::vector<uint32_t> words;        // text: the distinct words, ascending (0 = most frequent)
  std::vector<uint32_t> word_counts;  // text: term count of words[i] (sum = document length)
  std::vector<float> word_values;     // text: the value written, tf-idf of unit L2 norm
  uint64_t epoch = 0;                 // drift epoch whose truth scored it (0 without drift)
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
  uint64_t total_vocab = 0;  // distinct categorical values over all fields (text: words)
  double mean_features = 0;  // features per training sample, as the readers see them
  double mean_tokens = 0;    // text: tokens per training document (0 for ctr)
};

class Generator {
 public:
  // Validates the options (InvalidArgument naming the flag) and calibrates the truth model.
  static Result<std::unique_ptr<Generator>> Create(const GenOptions& options);
  ~Generator();

  void NextTrain(GenSample* s);  // the training stream
  void NextTest(GenSample* s);   // the independent test stream

  // Appends the sample as one line (with '\n') in options().format / any format (text samples:
  // libsvm or libffm; asked for criteo, they are written as libsvm).
  void AppendLine(const GenSample& s, std::string* out) const {
    AppendLine(options_.format, s, out);
  }
  void AppendLine(Format format, const GenSample& s, std::string* out) const;

  uint64_t vocab(uint32_t field) const { return vocab_[field]; }
  // Active values over all fields (text: words); with drift, at any one time.
  uint64_t total_vocab() const;
  // 1-based LIBSVM index of value (id) v of field f (text: of word v, with f = 0), and of
  // numeric feature k. Without drift offsets_ are the prefix sums of the vocabularies; with
  // drift f * IdSpace() (the layout above).
  uint64_t FeatureIndex(uint32_t field, uint32_t value) const {
    return offsets_[field] + value + 1;
  }
  uint64_t NumericIndex(uint32_t k) const { return offsets_.back() + k + 1; }
  // Ids per field: with drift S (above), without it the largest vocabulary.
  uint64_t IdSpace() const { return id_space_; }
  // Drift: values retired (and started) per field and epoch; 0 without drift.
  uint64_t retired_per_epoch(uint32_t field) const { return retire_.empty() ? 0 : retire_[field]; }

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
  // Draws values and counts (ctr) or a document (text); with label also the logit and label.
  // Drift: ranks (0-based) become the ids active in s->epoch, in place.
  void Draw(Stream* stream, GenSample* s, bool label) const;
  void DrawDocument(Stream* stream, GenSample* s) const;
  void DriftIds(GenSample* s) const;

  GenOptions options_;
  std::vector<uint64_t> vocab_;
  std::vector<uint64_t> offsets_;  // fields + 1 index offsets (FeatureIndex)
  std::vector<uint64_t> retire_;   // drift: R_f per field; empty without drift
  uint64_t id_space_ = 0;
  uint64_t train_drawn_ = 0;  // training samples drawn: the drift epoch's clock
  std::unique_ptr<Model> model_;
  std::unique_ptr<Stream> train_, test_;
};

// Criteo C-column token of value v in field f: 8 lowercase hex digits of a bijection of v, so
// distinct values never share a token.
std::string CriteoToken(uint32_t field, uint32_t value);

// Generates the files and returns the summary. Errors name the file or the option.
Result<GenSummary> Generate(const GenOptions& options);

// A stream of training samples (GenOptions' samples, out and test_* do not apply, gzip is
// refused; truth_out, without drift, is written before the stream starts).
struct GenStreamOptions {
  uint64_t samples = 0;  // samples to write; 0: endless
  double rate = 0;       // samples per second; 0: as fast as the reader takes them
  int fd = 1;            // where the lines go (not closed)
};
struct GenStreamSummary {
  uint64_t samples = 0;        // lines written in full
  bool reader_closed = false;  // ended because the reader went away (EPIPE)
};
// Writes options' training stream (AppendLine lines in options.format) to stream.fd through a
// 1 MiB buffer, flushed when full, at the end and before every pacing sleep (so a slow stream
// is not held back). Pacing: sample i is due at start + i / rate; the writer sleeps (no busy
// wait) when more than 1 ms ahead, and catches up at most 1 s of lag after a stall (a token
// bucket one second deep). Blocks until done; an endless stream returns only when the reader
// goes away. EPIPE is the normal end of a stream read by e.g. `head`: Ok with reader_closed
// (the caller ignores SIGPIPE, or the signal ends the process first). Memory stays constant.
// Errors: InvalidArgument naming the option, IoError for other write failures.
Result<GenStreamSummary> GenerateStream(const GenOptions& options, const GenStreamOptions& stream);

// A truth file read back (docs/data-formats.md). Scores GenSamples like Generator::Logit, so a
// test can check the file, and a trainer can compare its learned weights with the truth.
// Text truths have fields = 1, vocab = {words}, and weight[w] for word w.
struct TruthTable {
  Truth kind = Truth::kLr;
  Layout layout = Layout::kCtr;
  uint32_t fields = 0, numeric = 0, factors = 0, hidden = 0;
  std::vector<uint64_t> vocab;    // per field
  std::vector<uint64_t> offsets;  // fields + 1 prefix sums
  double bias = 0;
  std::vector<double> numeric_weight;  // numeric
  std::vector<double> weight;          // lr, fm, ffm: per value, at offsets[f] + v
  // Per value at (offsets[f] + v) * stride: fm factors and mlp embeddings (stride = factors);
  // ffm u[f][v][g] for every field g at + g * factors (stride = fields * factors; g = f unused).
  std::vector<double> vectors;
  std::vector<double> hidden_bias, out_weight;  // mlp: hidden
  std::vector<double> in_weight;                // mlp: hidden x (fields * factors), row-major
  size_t VectorStride() const { return kind == Truth::kFfm ? size_t{fields} * factors : factors; }
  double Logit(const GenSample& s) const;
};
Result<TruthTable> LoadTruth(const std::string& path);

}  // namespace ferry::models
