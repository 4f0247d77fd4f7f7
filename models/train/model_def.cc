// Model kinds as parameter-server tables, and their default hyper-parameters (model_def.h).
#include "models/train/model_def.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "models/data/field_map.h"
#include "models/data/reader.h"
#include "models/train/auto_settings.h"

namespace ferry::models {

namespace {

float Or(float v, float fallback) {
  return v >= 0.0f ? v : fallback;
}

// The linear weights' defaults are per unit of feature value: scaling every value by c scales the
// weights a linear model needs by 1 / c and the gradients by c. With s = o.step_scale (1 / the
// values' root mean square), a linear step is multiplied by s, an L1 weight (in gradient units)
// divided by s, an L2 weight by s^2 (FTRL's beta and Adagrad's initial accumulator are left
// alone: they set how cautious the first steps on a rare coordinate are, and the sweep found
// them best unscaled). Factors and embeddings are not scaled (Latent says why).
float Step(const TrainOptions& o, float v) {
  return static_cast<float>(v * o.step_scale);
}
float L1(const TrainOptions& o, float v) {
  return static_cast<float>(v / o.step_scale);
}
float L2(const TrainOptions& o, float v) {
  return static_cast<float>(v / (o.step_scale * o.step_scale));
}

// FTRL-Proximal as McMahan et al. run it on sparse CTR data; the per-coordinate adaptive rate
// makes it insensitive to the batch size (gradients are sums over the batch).
ps::OptimizerSpec Ftrl(const TrainOptions& o) {
  ps::OptimizerSpec s;
  s.kind = ps::Optimizer::kFtrl;
  s.alpha = Or(o.alpha, Step(o, kHyperDefaults.ftrl_alpha));
  s.beta = Or(o.beta, kHyperDefaults.ftrl_beta);
  s.l1 = Or(o.l1, L1(o, kHyperDefaults.ftrl_l1));
  s.l2 = Or(o.l2, L2(o, kHyperDefaults.ftrl_l2));
  return s;
}

// Adagrad with a default step `lr`, L2 `l2` (both per unit of value) and initial accumulator
// `acc` unless the flags say (`user_l2`: --l2 for the lr model's weights, --factor-l2 for
// factors and embeddings).
ps::OptimizerSpec Adagrad(const TrainOptions& o, float lr, float l2, float user_l2, float acc) {
  ps::OptimizerSpec s;
  s.kind = ps::Optimizer::kAdagrad;
  s.learning_rate = Or(o.learning_rate, lr);
  s.l2 = Or(user_l2, l2);
  s.initial_accumulator = Or(o.initial_accumulator, acc);
  return s;
}

ps::TableSpec Table(std::string name, uint32_t dim, ps::OptimizerSpec opt) {
  ps::TableSpec t;
  t.name = std::move(name);
  t.dim = dim;
  t.optimizer = opt;
  t.initial_rows = 1u << 16;
  return t;
}

// Fields of the data, for the field-aware models: criteo's 39, the field map's, or those of the
// first lines of the first train file (libffm). A field the count misses makes the kernel refuse
// the batch that has it, naming the field.
Result<uint32_t> CountFields(const TrainOptions& o) {
  if (o.format == Format::kCriteo) return kCriteoFields;
  if (!o.field_map.empty()) {
    FERRY_ASSIGN_OR_RETURN(FieldMap map, FieldMap::Load(o.field_map));
    return std::max(map.num_fields(), 1u);
  }
  if (o.format == Format::kLibsvm) return 1u;
  ReaderOptions ro;
  ro.format = o.format;
  ro.files = {o.train_files.front()};
  ro.hash_seed = o.hash_seed;
  ro.hash_bits = o.hash_bits;
  ro.on_malformed = [](const std::string&) {};
  FERRY_ASSIGN_OR_RETURN(auto reader, Reader::Open(ro));
  Batch b;
  FERRY_ASSIGN_OR_RETURN(size_t n, reader->Next(10000, &b));
  if (n == 0) return InvalidArgument(o.train_files.front() + " holds no sample to count fields in");
  uint32_t fields = 0;
  for (uint32_t f : b.fields) fields = std::max(fields, f + 1);
  return std::max(fields, 1u);
}

// The feature flags (feature_flags.cc) make sense together only in some combinations.
Status ValidateFeatureOptions(const FeatureOptions& f) {
  if (f.admit_min_count == 1) {
    return InvalidArgument(
        "--admit-min-count 1 admits every feature at its first sighting, as without the flag: "
        "give 2 or more (or leave it out)");
  }
  if (f.admit_min_count > 255) {
    return InvalidArgument("--admit-min-count must be at most 255 (the sketch's counters)");
  }
  if (f.admit_min_count >= 2 && f.admit_prob < 1.0) {
    return InvalidArgument("--admit-min-count and --admit-prob are two admission rules: give one");
  }
  if (!(f.admit_prob > 0.0 && f.admit_prob <= 1.0)) {
    return InvalidArgument("--admit-prob must be in (0, 1]: 0 would admit no feature");
  }
  if (!(f.tick_seconds >= 0.001)) return InvalidArgument("--evict-tick must be >= 0.001 seconds");
  if (f.evict_unseen_seconds > 0 && f.evict_unseen_seconds < f.tick_seconds) {
    return InvalidArgument("--evict-unseen must be at least one --evict-tick");
  }
  if (!(f.score_decay > 0.0 && f.score_decay <= 1.0)) {
    return InvalidArgument("--score-decay must be in (0, 1]");
  }
  // Any of them goes with --replicas above 1: each shard's head admits and evicts, and its
  // replicas follow its decisions (docs/ps.md, "Replicas").
  return Status::Ok();
}

// The feature options on every sparse table (not the MLP's dense.<l> layers, whose rows are
// all needed): admission, the row bound, and tick eviction in ticks of --evict-tick.
void ApplyFeatureOptions(const FeatureOptions& f, ModelDef* d) {
  if (!f.any()) return;
  for (ps::TableSpec& t : d->tables) {
    if (t.name.starts_with("dense.")) continue;
    if (f.admit_min_count >= 2) {
      t.admission.kind = ps::AdmissionOptions::Kind::kFrequency;
      t.admission.min_count = f.admit_min_count;
    } else if (f.admit_prob < 1.0) {
      t.admission.kind = ps::AdmissionOptions::Kind::kProbability;
      t.admission.probability = f.admit_prob;
    }
    if (f.max_rows_per_server > 0) {
      t.max_rows = f.max_rows_per_server;
      t.initial_rows = std::min<size_t>(t.initial_rows, f.max_rows_per_server);
    }
    if (f.evict_unseen_seconds > 0) {
      t.evict_unseen_ticks =
          static_cast<uint32_t>(std::lround(f.evict_unseen_seconds / f.tick_seconds));
    }
    t.evict_score = f.evict_score;
    // score * decay^seconds: halved after ln(1/2) / ln(decay) seconds, in ticks. Scores matter
    // to --evict-score and to the bound's choice of victims only.
    if ((f.evict_score > 0 || f.max_rows_per_server > 0) && f.score_decay < 1.0) {
      t.score_half_life = std::log(0.5) / std::log(f.score_decay) / f.tick_seconds;
    }
  }
}

}  // namespace

Status ValidateTrainOptions(const TrainOptions& o) {
  if (o.train_files.empty()) return InvalidArgument("no training file (--train FILE...)");
  if (o.batch_size > (1u << 22)) return InvalidArgument("--batch-size must be 1..4194304");
  if (!(o.validation_fraction < 0.9)) {
    return InvalidArgument("--validation-fraction must be below 0.9");
  }
  if (o.epochs == 0 && o.validation_files.empty() && o.validation_fraction == 0) {
    return InvalidArgument(
        "--epochs auto watches held-out data: give --validation FILE or a "
        "--validation-fraction above 0, or a number of --epochs");
  }
  if (o.refit == TrainOptions::Refit::kOn && o.validation_fraction >= 0 && !CanRefit(o)) {
    return InvalidArgument(
        "--refit on needs automatic passes on a held-out fraction of the training lines (no "
        "--validation file, --validation-fraction above 0) and no --checkpoint-dir or --resume");
  }
  if (!(o.min_improvement >= 0 && o.min_improvement < 0.5)) {
    return InvalidArgument("--min-improvement must be in [0, 0.5)");
  }
  if (!o.field_map.empty() && o.format != Format::kLibsvm) {
    return InvalidArgument("--field-map is for libsvm input (libffm and criteo carry fields)");
  }
  if (o.optimizer != "sgd" && o.optimizer != "adagrad") {
    return InvalidArgument("--optimizer '" + o.optimizer + "' is not sgd or adagrad");
  }
  if (o.factors > 1024) return InvalidArgument("--factors must be 1..1024");
  if (o.servers == 0 || o.workers == 0) return InvalidArgument("--servers/--workers must be >= 1");
  if (std::isnan(o.init_std)) return InvalidArgument("--init-std must be >= 0");
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) {
    return InvalidArgument("--checkpoint-every needs --checkpoint-dir");
  }
  if (!o.checkpoint_dir.empty() && o.consistency.kind != ps::Consistency::kBsp) {
    return InvalidArgument(
        "--checkpoint-dir needs --consistency bsp (only a bsp clock boundary "
        "is the same point on every server)");
  }
  if (o.backup_workers > 0) {
    if (o.consistency.kind != ps::Consistency::kBsp) {
      return InvalidArgument(
          "--backup-workers needs --consistency bsp (only a bsp clock waits "
          "for the workers)");
    }
    if (o.backup_workers >= o.workers) {
      return InvalidArgument(
          "--backup-workers must be less than --workers (a clock needs at "
          "least one worker's pushes)");
    }
    if (StreamTraining(o)) {
      return InvalidArgument(
          "--backup-workers trains passes over files: a stream or a followed "
          "directory is read by every worker in step, and a worker left "
          "behind could not skip its share");
    }
  }
  return ValidateFeatureOptions(o.features);
}

namespace {

// A sparse table of `dim`-wide rows (factors, embeddings) with the model's defaults `dflt`:
// Adagrad, rows drawn from N(0, init_std).
ps::TableSpec Latent(std::string name, uint32_t dim, const LatentDefaults& dflt,
                     const TrainOptions& o) {
  // Not scaled by the values' scale: what a factor or an embedding feeds is a sum over the row
  // (the FM's sum_i v_i x_i, a field's pooled embedding), whose size follows the row's L2 norm
  // and not its values: a unit-norm text row of 700 words and a one-hot row of 26 fields move
  // those sums alike for the same step. Scaled like the linear weights, an FM on 1,500
  // documents started with pairwise logits of standard deviation about 1 and ended at 0.475
  // against FTRL's 0.361; unscaled, 0.359.
  ps::TableSpec t = Table(std::move(name), dim,
                          Adagrad(o, dflt.step, dflt.l2, o.factor_l2, dflt.initial_accumulator));
  t.init.kind = ps::InitializerSpec::Kind::kNormal;
  t.init.b = Or(o.init_std, dflt.init_std);
  t.init.seed = o.seed;
  return t;
}

int Add(ModelDef* d, ps::TableSpec t) {
  d->tables.push_back(std::move(t));
  return static_cast<int>(d->tables.size() - 1);
}

ps::OptimizerSpec LrOptimizer(const TrainOptions& o) {
  if (o.optimizer != "sgd") {
    // The lr model's weights: scaled as FTRL's (per unit of feature value).
    return Adagrad(o, Step(o, kHyperDefaults.lr_step), L2(o, kHyperDefaults.lr_l2), o.l2,
                   kHyperDefaults.lr_initial_accumulator);
  }
  ps::OptimizerSpec s;
  s.kind = ps::Optimizer::kSgd;
  // Gradients are sums over the batch: scale the step by the batch size.
  s.learning_rate = Or(o.learning_rate, 0.5f / static_cast<float>(o.batch_size));
  s.l2 = Or(o.l2, 0.0f);
  return s;
}

// The MLP part of mlp and deepfm: embeddings (already added) feed dense.<l>, one Adam row each.
Status AddDense(ModelDef* d, const TrainOptions& o) {
  FERRY_RETURN_IF_ERROR(d->shape.Validate());
  for (size_t l = 0; l < d->shape.NumLayers(); ++l) {
    ps::OptimizerSpec adam;
    adam.kind = ps::Optimizer::kAdam;
    adam.learning_rate = o.dense_learning_rate;
    ps::TableSpec t = Table("dense." + std::to_string(l),
                            static_cast<uint32_t>(d->shape.LayerParamCount(l)), adam);
    t.initial_rows = 64;
    // He-uniform for the ReLU layers, Glorot-uniform for the output (biases start small
    // too: the initializer is per row, and each layer is one row).
    const double in = static_cast<double>(d->shape.LayerIn(l));
    const double out = static_cast<double>(d->shape.LayerOut(l));
    const double bound =
        l + 1 < d->shape.NumLayers() ? std::sqrt(6.0 / in) : std::sqrt(6.0 / (in + out));
    t.init.kind = ps::InitializerSpec::Kind::kUniform;
    t.init.a = static_cast<float>(-bound);
    t.init.b = static_cast<float>(bound);
    t.init.seed = o.seed + 1000 + l;
    d->dense.push_back(Add(d, t));
  }
  return Status::Ok();
}

Result<uint32_t> FieldsOf(const TrainOptions& o) {
  if (o.fields != 0) return o.fields;
  return CountFields(o);
}

}  // namespace

Result<ModelDef> DefineModel(const TrainOptions& o) {
  FERRY_RETURN_IF_ERROR(ValidateTrainOptions(o));
  ModelDef d;
  d.kind = o.model;
  if (!o.field_map.empty()) {
    FERRY_ASSIGN_OR_RETURN(FieldMap map, FieldMap::Load(o.field_map));
    d.field_map = map.Encode();
  }
  switch (o.model) {
    case ModelKind::kLr:
      d.linear = Add(&d, Table("weights", 1, LrOptimizer(o)));
      break;
    case ModelKind::kFtrl:
      d.linear = Add(&d, Table("weights", 1, Ftrl(o)));
      break;
    case ModelKind::kFm:
      d.k = o.factors != 0 ? o.factors : kDefaultFmFactors;
      d.linear = Add(&d, Table("linear", 1, Ftrl(o)));
      // Gradients are batch sums, so with a small initial accumulator Adagrad's first steps are
      // about lr * sign(g) on every coordinate of every frequent value at once; those moves are
      // coherent across the fields, and the pairwise term grows with (fields * lr)^2 (a step of
      // 0.05 with an accumulator of 0.1 diverged on 26-field data). An accumulator of 10 makes
      // those first steps small whatever the step, which is what lets the sweep's steps (0.04
      // to 0.16) learn interactions fast once the gradients have added up.
      d.factors = Add(&d, Latent("factors", d.k, kHyperDefaults.fm, o));
      break;
    case ModelKind::kFfm: {
      d.k = o.factors != 0 ? o.factors : kDefaultFfmFactors;
      FERRY_ASSIGN_OR_RETURN(d.fields, FieldsOf(o));
      if (uint64_t{d.k} * d.fields > kMaxFfmRowFloats) {
        return InvalidArgument("ffm rows of " + std::to_string(d.fields) + " fields x " +
                               std::to_string(d.k) + " factors exceed " +
                               std::to_string(kMaxFfmRowFloats) + " floats");
      }
      d.linear = Add(&d, Table("linear", 1, Ftrl(o)));
      d.factors = Add(&d, Latent("field_factors", d.k * d.fields, kHyperDefaults.ffm, o));
      break;
    }
    case ModelKind::kMlp:
    case ModelKind::kDeepFm: {
      FERRY_ASSIGN_OR_RETURN(d.shape.num_fields, FieldsOf(o));
      d.shape.embed_dim = o.embed_dim;
      d.shape.hidden = o.hidden;
      FERRY_RETURN_IF_ERROR(d.shape.Validate());
      const bool deepfm = o.model == ModelKind::kDeepFm;
      if (o.wide || deepfm) d.linear = Add(&d, Table(deepfm ? "linear" : "wide", 1, Ftrl(o)));
      d.embeddings = Add(&d, Latent("embeddings", o.embed_dim,
                                    deepfm ? kHyperDefaults.deepfm : kHyperDefaults.mlp, o));
      FERRY_RETURN_IF_ERROR(AddDense(&d, o));
      break;
    }
  }
  ApplyFeatureOptions(o.features, &d);
  return d;
}

std::string FormatOffset(double offset) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", offset);
  return buf;
}

ModelParams DescribeModel(const TrainOptions& o, const ModelDef& def) {
  ModelParams p;
  p["format"] = std::string(FormatName(o.format));
  p["hash_seed"] = std::to_string(o.hash_seed);
  p["hash_bits"] = std::to_string(o.hash_bits);
  p["bias_id"] = std::to_string(kBiasId);
  if (!def.field_map.empty()) {
    // A map too large for a parameter stays outside: ferry-predict then asks for --field-map.
    p["field_map"] =
        def.field_map.size() <= kMaxModelParamValueBytes ? def.field_map : kExternalFieldMap;
  }
  for (const ps::TableSpec& t : def.tables) {
    const ps::OptimizerSpec& s = t.optimizer;
    std::string d = std::string(ps::OptimizerName(s.kind));
    if (s.kind == ps::Optimizer::kFtrl) {
      d += " alpha=" + std::to_string(s.alpha) + " beta=" + std::to_string(s.beta) +
           " l1=" + std::to_string(s.l1) + " l2=" + std::to_string(s.l2);
    } else {
      d += " lr=" + std::to_string(s.learning_rate) + " l2=" + std::to_string(s.l2);
    }
    p["optimizer." + t.name] = d;
  }
  if (def.kind == ModelKind::kFm || def.kind == ModelKind::kFfm) {
    p["factors"] = std::to_string(def.k);
  }
  if (def.kind == ModelKind::kFfm) p["fields"] = std::to_string(def.fields);
  if (def.kind == ModelKind::kMlp || def.kind == ModelKind::kDeepFm) {
    p["mlp_shape"] = def.shape.Encode();
    p["wide"] = def.linear >= 0 ? "1" : "0";
  }
  return p;
}

Result<ps::JobSpec> MakeJob(const TrainOptions& o, const ModelDef& def) {
  ps::JobSpec job;
  job.tables = def.tables;
  job.servers = o.servers;
  job.workers = o.workers;
  job.replicas = o.replicas;
  job.spares = o.spares;
  job.elastic = o.elastic;
  job.join_slots = o.join_slots;
  job.worker_join_slots = o.worker_join_slots;
  FERRY_RETURN_IF_ERROR(CheckDealtTraining(o));
  // An elastic job's leave moves whole shards: with 4 a server, the leaver's rows spread over
  // the others (one shard a server would land all of them on one).
  job.shards = o.elastic && o.shards == 0 ? 4 * o.servers * o.server_threads : o.shards;
  job.backup_workers = o.backup_workers;
  job.server_threads = o.server_threads;
  job.peer_timeout = ps::Millis(static_cast<int64_t>(o.peer_timeout_s * 1000));
  job.transport = o.transport;
  job.consistency = o.consistency;
  job.secret = o.secret;
  job.fp16_push = o.fp16_push;
  job.push_filter = o.push_filter;
  job.restore_dir = o.resume;
  job.evict_tick = ps::Millis(std::max<int64_t>(1, std::llround(o.features.tick_seconds * 1000)));
  job.checkpoint_dir = o.checkpoint_dir;
  if (!o.checkpoint_dir.empty()) {
    job.checkpoint_every =
        o.checkpoint_every > 0 ? o.checkpoint_every : TrainOptions::kDefaultCheckpointEvery;
  }
  // Requests of a batch: its unique ids (at most every feature occurrence) fit one request.
  job.max_keys_per_request = 1u << 16;
  uint64_t widest = 1;
  for (const ps::TableSpec& t : def.tables) widest = std::max<uint64_t>(widest, t.dim);
  // The arena holds two batches' rows per table (the next batch is pulled while this one
  // computes); the send buffer their keys and gradients. Generous: it is virtual memory.
  job.arena_bytes = std::max<uint64_t>(64ull << 20, widest * 4 * 4 + (1u << 20));
  job.send_bytes = job.arena_bytes;
  job.staging_bytes = std::max<uint64_t>(16ull << 20, widest * 4 * 4 + (1u << 20));
  FERRY_RETURN_IF_ERROR(ps::ValidateJob(job));
  return job;
}

}  // namespace ferry::models
