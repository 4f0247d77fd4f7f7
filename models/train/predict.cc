// ferry-predict's engine (predict.h).
#include "models/train/predict.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "models/data/field_map.h"
#include "models/data/reader.h"
#include "models/eval/calibration.h"
#include "models/eval/metrics.h"
#include "models/kernels/mlp_shape.h"
#include "models/train/model_def.h"
#include "models/train/model_kernel.h"
#include "models/train/step.h"

namespace ferry::models {

namespace {

Result<uint64_t> ParamU64(const Model& m, std::string_view key) {
  FERRY_ASSIGN_OR_RETURN(std::string_view v, m.RequireParam(key));
  uint64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size()) {
    return ProtocolError("model parameter " + std::string(key) + " = '" + std::string(v) +
                         "' is not a number");
  }
  return out;
}

bool IsDense(const ModelLayout& m, size_t t) {
  return std::find(m.dense.begin(), m.dense.end(), static_cast<int>(t)) != m.dense.end();
}

// The model file's tables in the roles of ModelLayout (names as in model_def.h).
struct ModelTables {
  ModelLayout layout;
  std::vector<const ModelTable*> tables;
};

Result<ModelTables> TablesOf(const Model& model) {
  ModelTables m;
  m.layout.kind = model.kind;
  auto add = [&m](const ModelTable* t) {
    m.tables.push_back(t);
    return static_cast<int>(m.tables.size() - 1);
  };
  auto require = [&](std::string_view name, uint32_t dim) -> Result<int> {
    FERRY_ASSIGN_OR_RETURN(const ModelTable* t, model.RequireTable(name, dim));
    return add(t);
  };
  switch (model.kind) {
    case ModelKind::kLr:
    case ModelKind::kFtrl: {
      FERRY_ASSIGN_OR_RETURN(m.layout.linear, require("weights", 1));
      return m;
    }
    case ModelKind::kFm:
    case ModelKind::kFfm: {
      FERRY_ASSIGN_OR_RETURN(uint64_t k, ParamU64(model, "factors"));
      uint64_t fields = 1;
      if (model.kind == ModelKind::kFfm) {
        FERRY_ASSIGN_OR_RETURN(fields, ParamU64(model, "fields"));
      }
      if (k == 0 || fields == 0 || k * fields > kMaxFfmRowFloats) {
        return ProtocolError("model parameters factors = " + std::to_string(k) +
                             ", fields = " + std::to_string(fields) + " are out of range");
      }
      m.layout.k = static_cast<uint32_t>(k);
      m.layout.fields = static_cast<uint32_t>(fields);
      FERRY_ASSIGN_OR_RETURN(m.layout.linear, require("linear", 1));
      FERRY_ASSIGN_OR_RETURN(m.layout.factors,
                             require(model.kind == ModelKind::kFm ? "factors" : "field_factors",
                                     static_cast<uint32_t>(k * fields)));
      return m;
    }
    case ModelKind::kMlp:
    case ModelKind::kDeepFm: {
      FERRY_ASSIGN_OR_RETURN(std::string_view enc, model.RequireParam("mlp_shape"));
      FERRY_ASSIGN_OR_RETURN(m.layout.shape, MlpShape::Parse(enc));
      const char* wide = model.kind == ModelKind::kMlp ? "wide" : "linear";
      if (const ModelTable* t = model.FindTable(wide)) {
        if (t->dim() != 1) return ProtocolError(std::string("table ") + wide + " is not 1 wide");
        m.layout.linear = add(t);
      }
      FERRY_ASSIGN_OR_RETURN(m.layout.embeddings, require("embeddings", m.layout.shape.embed_dim));
      for (size_t l = 0; l < m.layout.shape.NumLayers(); ++l) {
        const std::string name = "dense." + std::to_string(l);
        FERRY_ASSIGN_OR_RETURN(
            int t, require(name, static_cast<uint32_t>(m.layout.shape.LayerParamCount(l))));
        if (m.tables[t]->Find(0) == nullptr) {
          return ProtocolError("table " + name + " lacks its row (key 0)");
        }
        m.layout.dense.push_back(t);
      }
      return m;
    }
  }
  return ProtocolError("unknown model kind");
}

// The model's intercept calibration (0 without one). kProtocol for a value that is not a
// finite number.
Result<double> OffsetOf(const Model& model) {
  auto it = model.params.find(kLogitOffsetParam);
  if (it == model.params.end()) return 0.0;
  char* end = nullptr;
  const double d = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || end != it->second.c_str() + it->second.size() || !std::isfinite(d) ||
      std::abs(d) > kMaxOffset) {
    return ProtocolError("model parameter " + std::string(kLogitOffsetParam) + " = '" + it->second +
                         "' is not an offset");
  }
  return d;
}

// The field map the model was trained with (or the one given instead), for libsvm input.
Result<std::shared_ptr<const FieldMap>> FieldMapOf(const Model& model, const ScorerOptions& o,
                                                   Format format) {
  std::shared_ptr<const FieldMap> out;
  if (!o.field_map.empty()) {
    FERRY_ASSIGN_OR_RETURN(FieldMap map, FieldMap::Load(o.field_map));
    out = std::make_shared<const FieldMap>(std::move(map));
    return out;
  }
  auto it = model.params.find("field_map");
  if (it == model.params.end() || format != Format::kLibsvm) return out;
  if (it->second == kExternalFieldMap) {
    return InvalidArgument(
        "the model was trained with a field map too large to carry in the model file: give it "
        "again with --field-map");
  }
  auto map = FieldMap::Parse(it->second);
  if (!map.ok()) return map.status().Annotate("the model's field_map parameter");
  out = std::make_shared<const FieldMap>(std::move(*map));
  return out;
}

}  // namespace

// Rows of every table for a batch's unique ids, looked up once per batch.
struct ScoreScratch::Impl {
  struct Accessor {
    const std::vector<const float*>* rows;
    const float* operator()(uint32_t u) const { return (*rows)[u]; }
  };
  UniqueIds ids;
  MlpWorkspace ws;
  std::vector<std::vector<const float*>> rows;  // per table, per unique id
  std::vector<std::vector<float>> zero;         // per table: the row an unknown key reads
  std::vector<Accessor> access;
};

ScoreScratch::ScoreScratch() : impl_(std::make_unique<Impl>()) {}
ScoreScratch::~ScoreScratch() = default;
ScoreScratch::ScoreScratch(ScoreScratch&&) noexcept = default;
ScoreScratch& ScoreScratch::operator=(ScoreScratch&&) noexcept = default;

// How the model was trained to read its data (format, hashing, field map), with what the options
// override; then its tables and its calibration.
Result<Scorer> Scorer::Create(const Model& model, const ScorerOptions& o) {
  Scorer s;
  std::string_view format = o.format;
  if (format.empty()) {
    FERRY_ASSIGN_OR_RETURN(format, model.RequireParam("format"));
  }
  FERRY_ASSIGN_OR_RETURN(s.format_, ParseFormat(format));
  FERRY_ASSIGN_OR_RETURN(s.hash_seed_, ParamU64(model, "hash_seed"));
  FERRY_ASSIGN_OR_RETURN(uint64_t bits, ParamU64(model, "hash_bits"));
  s.hash_bits_ = static_cast<uint32_t>(bits);
  FERRY_ASSIGN_OR_RETURN(s.field_map_, FieldMapOf(model, o, s.format_));
  FERRY_ASSIGN_OR_RETURN(ModelTables m, TablesOf(model));
  s.layout_ = std::move(m.layout);
  s.tables_ = std::move(m.tables);
  for (int t : s.layout_.dense) s.dense_rows_.push_back(s.tables_[t]->Find(0));
  FERRY_ASSIGN_OR_RETURN(s.offset_, OffsetOf(model));
  return s;
}

Status Scorer::Score(const Batch& b, std::span<float> probs, ScoreScratch* scratch,
                     double* logloss_sum) const {
  ScoreScratch::Impl& x = *scratch->impl_;
  const size_t n = b.size();
  if (probs.size() < n) return InvalidArgument("Scorer::Score: probs is shorter than the batch");
  if (x.rows.size() != tables_.size()) {
    x.rows.assign(tables_.size(), {});
    x.zero.clear();
    x.access.clear();
    for (size_t t = 0; t < tables_.size(); ++t) {
      x.zero.emplace_back(tables_[t]->dim(), 0.0f);
      x.access.push_back(ScoreScratch::Impl::Accessor{&x.rows[t]});
    }
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (x.zero[t].size() != tables_[t]->dim()) x.zero[t].assign(tables_[t]->dim(), 0.0f);
  }
  x.ids.Build(b, layout_.linear >= 0);
  const std::vector<uint64_t>& ids = x.ids.ids();
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (IsDense(layout_, t)) continue;
    std::vector<const float*>& rows = x.rows[t];
    rows.resize(ids.size());
    for (size_t u = 0; u < ids.size(); ++u) {
      const float* r = tables_[t]->Find(ids[u]);
      rows[u] = r != nullptr ? r : x.zero[t].data();
    }
  }
  std::span<float> out = probs.first(n);
  auto l = RunModelKernel<false>(layout_, b, x.ids.uidx(), x.ids.bias(),
                                 std::span<const ScoreScratch::Impl::Accessor>(x.access),
                                 std::span<const NoTable>(), dense_rows_, {}, x.ws, out);
  FERRY_RETURN_IF_ERROR(l.status());
  // As ferry-train's evaluation does (step.cc): the same floats, the same loss.
  if (offset_ != 0) l = ApplyOffset(offset_, out, b.labels);
  if (logloss_sum != nullptr) *logloss_sum = *l;
  return Status::Ok();
}

Status Predict(const Model& model, const PredictOptions& o, std::FILE* out, PredictReport* report) {
  FERRY_ASSIGN_OR_RETURN(Scorer scorer,
                         Scorer::Create(model, ScorerOptions{o.format, o.field_map}));
  ReaderOptions ro;
  ro.files = o.files;
  ro.format = scorer.format();
  ro.hash_seed = scorer.hash_seed();
  ro.hash_bits = scorer.hash_bits();
  ro.threads = o.parse_threads;
  ro.strict = o.strict;
  ro.field_map = scorer.shared_field_map();
  // Malformed lines go to stderr as they come; the first also names what a file of no sample
  // held instead.
  std::string first_malformed;
  ro.on_malformed = [&first_malformed](const std::string& m) {
    if (first_malformed.empty()) first_malformed = m;
    std::fprintf(stderr, "%s\n", m.c_str());
  };
  FERRY_ASSIGN_OR_RETURN(auto reader, Reader::Open(ro));
  ScoreScratch scratch;
  std::vector<float> probs;
  LoglossAccumulator loss;
  AucAccumulator auc;
  Batch b;
  while (true) {
    b.Clear();
    FERRY_ASSIGN_OR_RETURN(size_t n, reader->Next(o.batch_size, &b));
    if (n == 0) break;
    probs.resize(n);
    double l = 0;
    FERRY_RETURN_IF_ERROR(scorer.Score(b, probs, &scratch, &l));
    loss.AddSum(l, n);
    FERRY_RETURN_IF_ERROR(auc.Add(probs, b.labels));
    for (float p : probs) {
      if (std::fprintf(out, "%.6g\n", static_cast<double>(p)) < 0) {
        return IoError("write the predictions", errno);
      }
    }
  }
  // Nothing to score is a mistake (the wrong file or --format), not an empty result.
  if (loss.count() == 0) return NoSampleError("sample", o.files, reader->stats(), first_malformed);
  if (report != nullptr) {
    report->samples = loss.count();
    report->logloss = loss.Mean();
    report->auc = auc.Compute().auc;
    report->malformed = reader->stats().malformed;
  }
  return Status::Ok();
}

}  // namespace ferry::models
