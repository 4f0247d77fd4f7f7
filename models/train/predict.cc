// ferry-predict's engine (predict.h).
#include "models/train/predict.h"

#include <algorithm>
#include <atomic>
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

// Rows of every table for a batch's unique ids, looked up once per batch, and the lookups of
// earlier batches of the same Scorer.
struct ScoreScratch::Impl {
  struct Accessor {
    const std::vector<const float*>* rows;
    const float* operator()(uint32_t u) const { return (*rows)[u]; }
  };
  // The last rows found for ids across calls, direct-mapped by id: a small batch (a served
  // request of 100 instances holds 0.55 unique ids per occurrence, ferry-predict's 4096 lines
  // 0.15) would otherwise probe the model's tables (large, cache-cold) for the same frequent ids
  // request after request. Entry e holds ids[e] and its row in each sparse table,
  // rows[e * sparse + i]. Valid for one Scorer (its generation; a scratch outlives versions in
  // ferry-serve), the pointers are the model's rows themselves: the same floats as a probe.
  struct RowCache {
    static constexpr unsigned kBits = 14;
    static constexpr size_t kEntries = size_t{1} << kBits;
    // Batches with more unique ids probe the tables directly (a quarter of the entries: above,
    // conflicts evict what the next batch would find; measured slower at 4096 lines).
    static constexpr size_t kMaxIds = kEntries / 4;
    uint64_t scorer = 0;        // the generation the entries belong to; 0: none
    std::vector<uint64_t> ids;  // 0: empty (ids below kReservedIds are never produced)
    std::vector<const float*> rows;
  };
  UniqueIds ids;
  MlpWorkspace ws;
  std::vector<std::vector<const float*>> rows;  // per table, per unique id
  std::vector<Accessor> access;                 // per table, over rows
  RowCache cache;
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
  // What Score needs per table, decided once: which tables it probes, and one zero row as wide
  // as the widest of them for the keys the model lacks.
  size_t widest = 0;
  for (size_t t = 0; t < s.tables_.size(); ++t) {
    if (IsDense(s.layout_, t)) continue;
    s.sparse_.push_back(t);
    widest = std::max<size_t>(widest, s.tables_[t]->dim());
  }
  s.zero_row_ = std::make_shared<const std::vector<float>>(widest, 0.0f);
  static std::atomic<uint64_t> generations{0};
  s.generation_ = generations.fetch_add(1, std::memory_order_relaxed) + 1;
  FERRY_ASSIGN_OR_RETURN(s.offset_, OffsetOf(model));
  return s;
}

Status Scorer::Score(const Batch& b, std::span<float> probs, ScoreScratch* scratch,
                     double* logloss_sum) const {
  ScoreScratch::Impl& x = *scratch->impl_;
  const size_t n = b.size();
  if (probs.size() < n) return InvalidArgument("Scorer::Score: probs is shorter than the batch");
  if (x.rows.size() != tables_.size()) {  // a scratch's first call, or another model's
    x.rows.assign(tables_.size(), {});
    x.access.clear();
    for (size_t t = 0; t < tables_.size(); ++t) {
      x.access.push_back(ScoreScratch::Impl::Accessor{&x.rows[t]});
    }
  }
  x.ids.Build(b, layout_.linear >= 0);
  const std::vector<uint64_t>& ids = x.ids.ids();
  for (size_t t : sparse_) x.rows[t].resize(ids.size());
  const float* const zero = zero_row_->data();
  using RowCache = ScoreScratch::Impl::RowCache;
  if (ids.size() > RowCache::kMaxIds) {
    // A large batch (ferry-predict's): probe each table; the cache would only thrash.
    for (size_t t : sparse_) {
      const ModelTable& table = *tables_[t];
      std::vector<const float*>& rows = x.rows[t];
      for (size_t u = 0; u < ids.size(); ++u) {
        const float* r = table.Find(ids[u]);
        rows[u] = r != nullptr ? r : zero;
      }
    }
  } else {
    RowCache& cache = x.cache;
    const size_t sparse = sparse_.size();
    if (cache.scorer != generation_) {
      cache.scorer = generation_;
      cache.ids.assign(RowCache::kEntries, 0);
      cache.rows.assign(RowCache::kEntries * sparse, nullptr);
    }
    for (size_t u = 0; u < ids.size(); ++u) {
      const uint64_t id = ids[u];
      // Fibonacci hashing on the top bits (ids are hashes already; the bias id is 1).
      const size_t e = static_cast<size_t>((id * 0x9e3779b97f4a7c15ull) >> (64 - RowCache::kBits));
      const float** cached = cache.rows.data() + e * sparse;
      if (cache.ids[e] != id || id == 0) {  // 0 marks an empty entry: never a hit
        cache.ids[e] = id;
        for (size_t i = 0; i < sparse; ++i) {
          const float* r = tables_[sparse_[i]]->Find(id);
          cached[i] = r != nullptr ? r : zero;
        }
      }
      for (size_t i = 0; i < sparse; ++i) x.rows[sparse_[i]][u] = cached[i];
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
