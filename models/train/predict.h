// Scoring with an exported model (models/io): ferry-predict's engine, and ferry-serve's
// (models/serve/). The same kernels as training run forward over rows looked up in the model file
// (a key the model does not know reads as a zero row, as an untrained feature would).
//
// Two layers, one code path:
//   Scorer   the model's tables in their kernel roles, its input format and hashing, its
//            intercept calibration: scores a parsed Batch in memory. ferry-serve keeps one per
//            model version.
//   Predict  ferry-predict: files through a Reader, batches through a Scorer, lines out.
//
// Blocking: Predict reads every file (with parse_threads > 1 on reader threads of its own) and
// writes `out` before returning. Ownership: `model` and `out` are borrowed for the call; `out` is
// neither flushed nor closed. Call from any one thread.
#pragma once

#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/data/batch.h"
#include "models/data/parse.h"
#include "models/io/model.h"
#include "models/train/model_kernel.h"
#include "transport/status.h"

namespace ferry::models {

class FieldMap;  // models/data/field_map.h

struct ScorerOptions {
  // Empty: the format the model was trained on (its "format" parameter).
  std::string format;
  // A field map file (libsvm): overrides the map the model carries ("" : the model's, if any).
  std::string field_map;
};

// Per-thread scratch of Scorer::Score (unique ids, row pointers, the MLP workspace). Reused across
// calls it allocates only while batches grow. For small batches (a served request) it also keeps
// the rows that earlier calls with the same Scorer found (16K ids, 8 bytes per id and sparse
// table: 384 KiB for fm), so that frequent ids are not looked up in the model again: reuse one
// per thread. Not shared between threads.
class ScoreScratch {
 public:
  ScoreScratch();
  ~ScoreScratch();
  ScoreScratch(ScoreScratch&&) noexcept;
  ScoreScratch& operator=(ScoreScratch&&) noexcept;

 private:
  friend class Scorer;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A model ready to score: how its samples are read (format, hash seed and bits, field map) and
// which table plays which kernel role. Lifetime: reads `model`'s rows in place, so the model must
// outlive the Scorer (and must not change while it lives). Thread-safety: immutable after
// Create; Score is const and may run on many threads at once, each with its own ScoreScratch.
class Scorer {
 public:
  // kProtocol when the model lacks a table or parameter its kind needs (Model::RequireTable),
  // InvalidArgument for a bad format name or field map.
  static Result<Scorer> Create(const Model& model, const ScorerOptions& o);

  // What the parsers (parse.h) need to turn a line into the ids this model was trained on.
  Format format() const { return format_; }
  uint64_t hash_seed() const { return hash_seed_; }
  uint32_t hash_bits() const { return hash_bits_; }
  // Null when the input is not libsvm or the model has no field map.
  const FieldMap* field_map() const { return field_map_.get(); }
  const std::shared_ptr<const FieldMap>& shared_field_map() const { return field_map_; }

  // Writes one probability per sample of `b` into probs[0, b.size()) (probs.size() >= b.size()),
  // calibrated as ferry-train's evaluation does; *logloss_sum (when not null) gets the summed
  // logloss against b.labels.
  Status Score(const Batch& b, std::span<float> probs, ScoreScratch* scratch,
               double* logloss_sum = nullptr) const;

 private:
  Scorer() = default;
  ModelLayout layout_;
  std::vector<const ModelTable*> tables_;  // layout_'s role indices point here
  std::vector<const float*> dense_rows_;   // one per layer, in layer order
  std::vector<size_t> sparse_;             // tables_ read by id (not dense), fixed at Create
  // The row a key the model lacks reads (as wide as the widest sparse table); shared by copies,
  // as the rows a ScoreScratch caches are.
  std::shared_ptr<const std::vector<float>> zero_row_;
  uint64_t generation_ = 0;  // unique per Create: whose rows a ScoreScratch caches
  double offset_ = 0;
  Format format_ = Format::kLibsvm;
  uint64_t hash_seed_ = 0;
  uint32_t hash_bits_ = 0;
  std::shared_ptr<const FieldMap> field_map_;
};

struct PredictOptions {
  std::vector<std::string> files;
  // Empty: the format the model was trained on (its "format" parameter).
  std::string format;
  // A field map file (libsvm): overrides the map the model carries ("" : the model's, if any).
  std::string field_map;
  int parse_threads = 1;
  bool strict = false;
  uint32_t batch_size = 4096;
};

struct PredictReport {
  uint64_t samples = 0;
  double logloss = 0;  // against the files' labels
  double auc = 0;
  uint64_t malformed = 0;
};

// Writes one probability per line to `out` ("%.6g"), in input order. Files that hold no sample
// (empty, or every line malformed, blank or a comment) are InvalidArgument (NoSampleError,
// models/data/reader.h), with nothing written.
Status Predict(const Model& model, const PredictOptions& o, std::FILE* out, PredictReport* report);

}  // namespace ferry::models
