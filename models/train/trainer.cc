// The minibatch loop, evaluations and the report (trainer.h).
#include "models/train/trainer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "models/data/reader.h"
#include "models/eval/metrics.h"
#include "models/eval/metrics_json.h"
#include "models/eval/progress.h"
#include "models/train/export.h"
#include "models/train/step.h"

namespace ferry::models {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

ReaderOptions ReaderFor(const TrainOptions& o, const std::vector<std::string>& files,
                        uint32_t shard, uint32_t shards) {
  ReaderOptions r;
  r.format = o.format;
  r.files = files;
  r.shard = shard;
  r.num_shards = shards;
  r.strict = o.strict;
  r.threads = o.parse_threads;
  r.hash_seed = o.hash_seed;
  r.hash_bits = o.hash_bits;
  return r;
}

// A little-endian record for gathers: fixed fields then two float arrays.
struct Summary {
  uint64_t samples = 0;
  double seconds = 0;
  double loss_sum = 0;
  uint64_t malformed = 0;
  uint64_t test_n = 0;
  double test_loss_sum = 0;
  std::vector<float> scores, labels;

  std::vector<uint8_t> Encode() const {
    std::vector<uint8_t> out(48 + 8 * scores.size());
    uint8_t* p = out.data();
    auto put = [&p](const void* v, size_t n) {
      if (n != 0) std::memcpy(p, v, n);  // an empty vector's data() may be null
      p += n;
    };
    const uint64_t n = scores.size();
    put(&samples, 8), put(&seconds, 8), put(&loss_sum, 8), put(&malformed, 8);
    put(&test_loss_sum, 8), put(&n, 8);
    put(scores.data(), 4 * n), put(labels.data(), 4 * n);
    return out;
  }
  static Result<Summary> Decode(const std::vector<uint8_t>& in) {
    Summary s;
    if (in.size() < 48) return ProtocolError("worker summary is truncated");
    const uint8_t* p = in.data();
    auto get = [&p](void* v, size_t n) {
      if (n != 0) std::memcpy(v, p, n);
      p += n;
    };
    uint64_t n = 0;
    get(&s.samples, 8), get(&s.seconds, 8), get(&s.loss_sum, 8), get(&s.malformed, 8);
    get(&s.test_loss_sum, 8), get(&n, 8);
    if (n > (in.size() - 48) / 8 || in.size() != 48 + 8 * n) {
      return ProtocolError("worker summary has a bad length");
    }
    s.test_n = n;
    s.scores.resize(n);
    s.labels.resize(n);
    get(s.scores.data(), 4 * n), get(s.labels.data(), 4 * n);
    return s;
  }
};

class WorkerLoop {
 public:
  WorkerLoop(ps::Worker& w, const TrainOptions& o, const ModelDef& def)
      : w_(w), o_(o), def_(def), step_(w, def), lead_(w.index() == 0) {}

  Status Run(TrainReport* report);

 private:
  // Counts this worker's samples; with `share`, every worker's (an all-gather) for the steps
  // per epoch, else the total is estimated from this shard.
  Status CountSteps(bool share);
  Status TrainEpoch(uint32_t epoch);
  // Steps [first_step, steps_per_epoch) of `epoch` (the reader stands at first_step's batch).
  Status TrainSequential(uint32_t epoch, uint64_t first_step);
  // A job restored from a periodic checkpoint: reads this worker's data up to the checkpoint's
  // clock and checks that it lands on the position the checkpoint recorded. Returns the clock.
  Result<uint64_t> SeekToCheckpoint();
  Status TrainPipelined(uint32_t epoch);
  void Account(double loss, size_t n);
  Status MaybeEvaluate(uint32_t epoch);
  Status LoadEvalSet();
  Status EvaluateStream(uint32_t epoch);
  Status FinalEvaluation(Summary* mine);
  Status Export();
  void ShowProgress();

  ps::Worker& w_;
  const TrainOptions& o_;
  const ModelDef& def_;
  Stepper step_;
  bool lead_;
  std::unique_ptr<Reader> reader_;
  uint64_t steps_per_epoch_ = 0;  // bsp/ssp
  uint64_t my_samples_ = 0;       // this worker's shard, one epoch (bsp/ssp)
  uint64_t position_ = 0;         // samples read since the start of the training, all epochs
  uint64_t total_samples_ = 0;    // all workers, one epoch (0: unknown)
  uint64_t batches_ = 0;          // this worker's batches so far
  uint64_t samples_ = 0;          // this worker's trained samples so far
  double loss_sum_ = 0;
  double recent_loss_ = 0;  // since the last evaluation
  uint64_t recent_n_ = 0;
  double ema_loss_ = std::nan("");
  double last_auc_ = std::nan("");
  Clock::time_point start_ = Clock::now();
  double train_seconds_ = 0;
  std::unique_ptr<ProgressDisplay> progress_;
  std::optional<MetricsJsonWriter> metrics_;
  std::vector<Batch> eval_set_;
};

void WorkerLoop::Account(double loss, size_t n) {
  loss_sum_ += loss;
  recent_loss_ += loss;
  recent_n_ += n;
  samples_ += n;
  ++batches_;
  if (n > 0) {
    const double mean = loss / static_cast<double>(n);
    ema_loss_ = std::isnan(ema_loss_) ? mean : 0.95 * ema_loss_ + 0.05 * mean;
  }
}

void WorkerLoop::ShowProgress() {
  if (progress_ == nullptr) return;
  ProgressState s;
  // Worker 0 sees its own progress; the others move at about the same pace.
  s.samples = samples_ * w_.num_workers();
  s.train_logloss = ema_loss_;
  s.last_auc = last_auc_;
  progress_->Update(s);
}

Status WorkerLoop::CountSteps(bool share) {
  // One pass over this worker's shard: the sample count makes the steps per epoch agree across
  // workers (bsp/ssp) and gives the progress display its total.
  Batch b;
  uint64_t n = 0;
  while (true) {
    b.Clear();
    FERRY_ASSIGN_OR_RETURN(size_t got, reader_->Next(1u << 16, &b));
    if (got == 0) break;
    n += got;
  }
  FERRY_RETURN_IF_ERROR(reader_->Rewind());
  my_samples_ = n;
  if (!share) {
    total_samples_ = n * w_.num_workers();
    return Status::Ok();
  }
  std::vector<uint8_t> mine(8);
  std::memcpy(mine.data(), &n, 8);
  FERRY_ASSIGN_OR_RETURN(auto all, w_.Gather(mine, /*to_all=*/true));
  uint64_t most = 0;
  total_samples_ = 0;
  for (const auto& part : all) {
    if (part.size() != 8) return ProtocolError("bad sample count from a worker");
    uint64_t c;
    std::memcpy(&c, part.data(), 8);
    most = std::max(most, c);
    total_samples_ += c;
  }
  steps_per_epoch_ = (most + o_.batch_size - 1) / o_.batch_size;
  if (total_samples_ == 0) return InvalidArgument("the training files hold no sample");
  return Status::Ok();
}

Result<uint64_t> WorkerLoop::SeekToCheckpoint() {
  const ps::Worker::Restored& r = *w_.restored();
  if (o_.consistency.kind != ps::Consistency::kBsp) {
    return InvalidArgument(
        "the checkpoint was taken at a bsp clock boundary: resume it with "
        "--consistency bsp, as the run that wrote it");
  }
  const uint64_t total = steps_per_epoch_ * o_.epochs;
  if (r.clock > total) {
    return InvalidArgument("the checkpoint is at batch " + std::to_string(r.clock) +
                           " but this training has " + std::to_string(total) +
                           " (other data, --epochs or --batch-size than the run that wrote it?)");
  }
  const uint64_t epoch_index = steps_per_epoch_ > 0 ? r.clock / steps_per_epoch_ : 0;
  position_ = epoch_index * my_samples_;
  if (epoch_index < o_.epochs) {
    Batch b;
    for (uint64_t step = 0; step < r.clock % steps_per_epoch_; ++step) {
      b.Clear();
      FERRY_ASSIGN_OR_RETURN(size_t n, reader_->Next(o_.batch_size, &b));
      position_ += n;
    }
  }
  if (position_ != *r.position) {
    return InvalidArgument(
        "worker " + std::to_string(w_.index()) + " had read " + std::to_string(*r.position) +
        " samples at the checkpoint's batch " + std::to_string(r.clock) + ", but these files " +
        "give " + std::to_string(position_) +
        " there (other data, --batch-size or --workers than the run that wrote it?)");
  }
  return r.clock;
}

Status WorkerLoop::TrainSequential(uint32_t epoch, uint64_t first_step) {
  Batch batch;
  Stepper::Slot slot;
  for (uint64_t step = first_step; step < steps_per_epoch_; ++step) {
    batch.Clear();
    FERRY_ASSIGN_OR_RETURN(size_t n, reader_->Next(o_.batch_size, &batch));
    position_ += n;
    if (n > 0) {
      FERRY_RETURN_IF_ERROR(step_.Begin(batch, &slot));
      FERRY_ASSIGN_OR_RETURN(double loss, step_.Finish(&slot, true, nullptr));
      Account(loss, n);
    }
    // An empty step still counts: every worker makes steps_per_epoch clocks.
    FERRY_RETURN_IF_ERROR(w_.Clock(position_));
    FERRY_RETURN_IF_ERROR(MaybeEvaluate(epoch));
    ShowProgress();
  }
  return Status::Ok();
}

Status WorkerLoop::TrainPipelined(uint32_t epoch) {
  Batch batches[2];
  Stepper::Slot slots[2];
  int cur = 0;
  FERRY_ASSIGN_OR_RETURN(size_t n, reader_->Next(o_.batch_size, &batches[cur]));
  if (n == 0) return Status::Ok();
  FERRY_RETURN_IF_ERROR(step_.Begin(batches[cur], &slots[cur]));
  while (true) {
    // Post the next batch's pulls before this one computes: their transfer overlaps the kernel.
    const int nxt = 1 - cur;
    batches[nxt].Clear();
    auto next_n = reader_->Next(o_.batch_size, &batches[nxt]);
    if (!next_n.ok()) {
      step_.Abandon(&slots[cur]);
      return next_n.status();
    }
    if (*next_n > 0) {
      Status s = step_.Begin(batches[nxt], &slots[nxt]);
      if (!s.ok()) {
        step_.Abandon(&slots[cur]);
        return s;
      }
    }
    auto loss = step_.Finish(&slots[cur], true, nullptr);
    if (!loss.ok()) {
      if (*next_n > 0) step_.Abandon(&slots[nxt]);
      return loss.status();
    }
    Account(*loss, batches[cur].size());
    if (*next_n == 0) break;
    cur = nxt;
    Status s = MaybeEvaluate(epoch);
    if (!s.ok()) {
      step_.Abandon(&slots[cur]);
      return s;
    }
    ShowProgress();
  }
  return Status::Ok();
}

Status WorkerLoop::LoadEvalSet() {
  if (o_.test_files.empty() || o_.eval_every == 0 || !lead_) return Status::Ok();
  FERRY_ASSIGN_OR_RETURN(auto r, Reader::Open(ReaderFor(o_, o_.test_files, 0, 1)));
  uint64_t left = o_.eval_samples;
  while (left > 0) {
    Batch b;
    FERRY_ASSIGN_OR_RETURN(size_t n, r->Next(std::min<uint64_t>(left, o_.batch_size), &b));
    if (n == 0) break;
    left -= n;
    eval_set_.push_back(std::move(b));
  }
  return Status::Ok();
}

Status WorkerLoop::EvaluateStream(uint32_t epoch) {
  LoglossAccumulator loss;
  AucAccumulator auc;
  std::vector<float> probs;
  Stepper::Slot slot;
  for (const Batch& b : eval_set_) {
    FERRY_RETURN_IF_ERROR(step_.Begin(b, &slot));
    FERRY_ASSIGN_OR_RETURN(double l, step_.Finish(&slot, false, &probs));
    loss.AddSum(l, b.size());
    FERRY_RETURN_IF_ERROR(auc.Add(probs, b.labels));
  }
  const AucResult a = auc.Compute();
  last_auc_ = a.auc;
  EvalRecord rec;
  rec.epoch = epoch;
  rec.batches = batches_;
  rec.samples = samples_ * w_.num_workers();
  rec.train_logloss = recent_n_ > 0 ? recent_loss_ / static_cast<double>(recent_n_) : std::nan("");
  rec.logloss = loss.Mean();
  rec.auc = a.auc;
  rec.elapsed_s = Seconds(start_);
  rec.samples_per_sec = rec.elapsed_s > 0 ? static_cast<double>(rec.samples) / rec.elapsed_s : 0;
  recent_loss_ = 0;
  recent_n_ = 0;
  if (metrics_) FERRY_RETURN_IF_ERROR(metrics_->Write(EvalLine("eval", rec)));
  if (progress_ != nullptr) {
    char line[256];
    std::snprintf(line, sizeof line, "eval  epoch %u  batch %llu  test logloss %.5f  auc %.5f",
                  epoch, static_cast<unsigned long long>(batches_), rec.logloss, rec.auc);
    progress_->Print(line);
  }
  return Status::Ok();
}

Status WorkerLoop::MaybeEvaluate(uint32_t epoch) {
  if (!lead_ || eval_set_.empty() || o_.eval_every == 0 || batches_ % o_.eval_every != 0) {
    return Status::Ok();
  }
  return EvaluateStream(epoch);
}

Status WorkerLoop::FinalEvaluation(Summary* mine) {
  if (o_.test_files.empty()) return Status::Ok();
  FERRY_ASSIGN_OR_RETURN(auto r,
                         Reader::Open(ReaderFor(o_, o_.test_files, w_.index(), w_.num_workers())));
  Stepper::Slot slot;
  std::vector<float> probs;
  Batch b;
  while (true) {
    b.Clear();
    FERRY_ASSIGN_OR_RETURN(size_t n, r->Next(o_.batch_size, &b));
    if (n == 0) break;
    FERRY_RETURN_IF_ERROR(step_.Begin(b, &slot));
    FERRY_ASSIGN_OR_RETURN(double l, step_.Finish(&slot, false, &probs));
    mine->test_loss_sum += l;
    mine->scores.insert(mine->scores.end(), probs.begin(), probs.end());
    mine->labels.insert(mine->labels.end(), b.labels.begin(), b.labels.end());
  }
  mine->test_n = mine->scores.size();
  return Status::Ok();
}

Status WorkerLoop::Run(TrainReport* report) {
  FERRY_ASSIGN_OR_RETURN(reader_,
                         Reader::Open(ReaderFor(o_, o_.train_files, w_.index(), w_.num_workers())));
  if (lead_) {
    if (!o_.metrics_json.empty()) {
      FERRY_ASSIGN_OR_RETURN(MetricsJsonWriter m, MetricsJsonWriter::Open(o_.metrics_json));
      metrics_.emplace(std::move(m));
    }
  }
  if (!o_.test_files.empty()) {
    // A missing or unreadable test file is an error now, not after the training.
    FERRY_RETURN_IF_ERROR(
        Reader::Open(ReaderFor(o_, o_.test_files, w_.index(), w_.num_workers())).status());
  }
  // bsp/ssp need the steps per epoch; a progress bar on a terminal wants the total. Otherwise
  // (asp, no bar) the counting pass over the data is skipped.
  const bool bar = lead_ && !o_.quiet &&
                   (o_.progress == TrainOptions::Progress::kAlways ||
                    (o_.progress == TrainOptions::Progress::kAuto && IsTerminal(STDERR_FILENO)));
  if (o_.consistency.kind != ps::Consistency::kAsp) {
    FERRY_RETURN_IF_ERROR(CountSteps(/*share=*/true));
  } else if (bar) {
    // Only worker 0 knows it has a terminal: it counts its own shard, without a gather (every
    // worker must make the same sequence of gathers), and scales by the worker count.
    FERRY_RETURN_IF_ERROR(CountSteps(/*share=*/false));
  }
  if (lead_ && !o_.quiet && o_.progress != TrainOptions::Progress::kNever) {
    ProgressOptions po;
    po.tty = o_.progress == TrainOptions::Progress::kAlways || IsTerminal(STDERR_FILENO);
    po.total_samples = total_samples_ * o_.epochs;
    progress_ = std::make_unique<ProgressDisplay>(std::cerr, po);
  }
  FERRY_RETURN_IF_ERROR(LoadEvalSet());
  // A periodic checkpoint's job goes on at its clock: one batch per clock under bsp.
  uint64_t first_step = 0;
  if (w_.restored() && w_.restored()->position) {
    FERRY_ASSIGN_OR_RETURN(first_step, SeekToCheckpoint());
    if (lead_ && !o_.quiet) {
      std::fprintf(stderr, "ferry-train: resumed at batch %llu of %llu\n",
                   static_cast<unsigned long long>(first_step),
                   static_cast<unsigned long long>(steps_per_epoch_ * o_.epochs));
    }
  }
  start_ = Clock::now();
  const bool pipelined = o_.consistency.kind == ps::Consistency::kAsp;
  const uint32_t first_epoch =
      steps_per_epoch_ > 0 ? static_cast<uint32_t>(first_step / steps_per_epoch_) + 1 : 1;
  for (uint32_t epoch = first_epoch; epoch <= o_.epochs; ++epoch) {
    // The first epoch's reader stands at its first batch (CountSteps rewound it, and a resumed
    // one was moved on by SeekToCheckpoint).
    if (epoch > first_epoch) FERRY_RETURN_IF_ERROR(reader_->Rewind());
    const uint64_t skip =
        epoch == first_epoch ? first_step % std::max<uint64_t>(steps_per_epoch_, 1) : 0;
    FERRY_RETURN_IF_ERROR(pipelined ? TrainPipelined(epoch) : TrainSequential(epoch, skip));
  }
  FERRY_RETURN_IF_ERROR(step_.Drain());
  train_seconds_ = Seconds(start_);
  // Every worker's pushes are applied before anyone evaluates the final model.
  FERRY_RETURN_IF_ERROR(w_.Barrier());
  Summary mine;
  mine.samples = samples_;
  mine.seconds = train_seconds_;
  mine.loss_sum = loss_sum_;
  mine.malformed = reader_->stats().malformed;
  FERRY_RETURN_IF_ERROR(FinalEvaluation(&mine));
  FERRY_ASSIGN_OR_RETURN(auto parts, w_.Gather(mine.Encode()));
  if (!lead_) return Status::Ok();
  TrainReport rep;
  LoglossAccumulator test_loss;
  AucAccumulator auc;
  double train_loss = 0;
  for (const auto& part : parts) {
    FERRY_ASSIGN_OR_RETURN(Summary s, Summary::Decode(part));
    rep.samples += s.samples;
    rep.train_seconds = std::max(rep.train_seconds, s.seconds);
    rep.malformed += s.malformed;
    train_loss += s.loss_sum;
    test_loss.AddSum(s.test_loss_sum, s.test_n);
    for (size_t i = 0; i < s.test_n; ++i) auc.Add(s.scores[i], s.labels[i]);
  }
  rep.train_logloss = rep.samples > 0 ? train_loss / static_cast<double>(rep.samples) : 0;
  rep.samples_per_sec =
      rep.train_seconds > 0 ? static_cast<double>(rep.samples) / rep.train_seconds : 0;
  rep.test_samples = test_loss.count();
  rep.test_logloss = test_loss.Mean();
  const AucResult a = auc.Compute();
  rep.test_auc = a.auc;
  if (progress_ != nullptr) {
    ProgressState s;
    s.samples = rep.samples;
    s.train_logloss = rep.train_logloss;
    s.last_auc = rep.test_auc;
    progress_->Finish(s);
  }
  if (metrics_) {
    EvalRecord rec;
    rec.epoch = o_.epochs;
    rec.batches = batches_;
    rec.samples = rep.samples;
    rec.train_logloss = rep.train_logloss;
    rec.logloss = rep.test_samples > 0 ? rep.test_logloss : std::nan("");
    rec.auc = rep.test_auc;
    rec.samples_per_sec = rep.samples_per_sec;
    rec.elapsed_s = Seconds(start_);
    MetricsLine line = EvalLine("final", rec);
    line.Set("test_samples", rep.test_samples);
    line.Set("model", ModelKindName(o_.model));
    line.Set("workers", static_cast<uint64_t>(w_.num_workers()));
    line.Set("servers", static_cast<uint64_t>(w_.num_servers()));
    FERRY_RETURN_IF_ERROR(metrics_->Write(line));
  }
  if (!o_.model_out.empty()) FERRY_RETURN_IF_ERROR(Export());
  if (report != nullptr) *report = rep;
  return Status::Ok();
}

Status WorkerLoop::Export() {
  // The servers write their shards next to the model file (a file system they all reach), this
  // worker turns them into the model, and the shards go.
  const std::string dir = o_.model_out + ".shards." + std::to_string(getpid());
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return IoError("create " + dir + " for the model export", errno);
  }
  Status s = w_.Checkpoint(dir);
  if (s.ok()) {
    s = ExportCheckpoint(dir, w_.job(), def_, DescribeModel(o_, def_), o_.model_out,
                         o_.model_format);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return s.ok() ? s : s.Annotate("export the model to " + o_.model_out);
}

}  // namespace

Status RunTraining(ps::Node& node, const TrainOptions& o, const ModelDef& def,
                   TrainReport* report) {
  Status first;
  if (ps::Worker* w = node.worker()) {
    WorkerLoop loop(*w, o, def);
    first = loop.Run(report);
    if (first.ok()) first = w->Finish();
  }
  Status joined = node.Join();
  return first.ok() ? joined : first;
}

}  // namespace ferry::models
