// One pass of a worker: the minibatch loops, the counting pass, resuming in the middle of a
// pass, streaming evaluation (worker_loop.h).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "models/data/stream_dealer.h"
#include "models/eval/metrics.h"
#include "models/train/auto_settings.h"
#include "models/train/gather_sums.h"
#include "models/train/worker_loop.h"

namespace ferry::models {

void WorkerLoop::Account(double loss, size_t n) {
  loss_sum_ += loss;
  epoch_loss_ += loss;
  epoch_n_ += n;
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
  FERRY_ASSIGN_OR_RETURN(std::vector<uint64_t> all,
                         GatherSums(w_, n, /*to_all=*/true, "bad sample count from a worker"));
  uint64_t most = 0;
  total_samples_ = 0;
  for (uint64_t c : all) {
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
  const uint64_t total = steps_per_epoch_ * o_.max_epochs;
  if (r.clock > total) {
    return InvalidArgument("the checkpoint is at batch " + std::to_string(r.clock) +
                           " but this training has at most " + std::to_string(total) +
                           " (other data, --epochs or --batch-size than the run that wrote it?)");
  }
  const uint64_t epoch_index = steps_per_epoch_ > 0 ? r.clock / steps_per_epoch_ : 0;
  position_ = epoch_index * my_samples_;
  if (epoch_index < o_.max_epochs) {
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
    if (clocks_to_skip_ > 0) {
      // Backup workers: the job completed this batch's clock without this worker; its place
      // in the data moves on with the job's clock (a resumed job finds it there too).
      --clocks_to_skip_;
      ++skipped_batches_;
      skipped_samples_ += n;
      continue;
    }
    const TrainClock::time_point began = TrainClock::now();
    if (n > 0) {
      FERRY_RETURN_IF_ERROR(step_.Begin(batch, &slot, Stepper::Use::kTrain));
      FERRY_ASSIGN_OR_RETURN(double loss, step_.Finish(&slot, true, nullptr));
      Account(loss, n);
    }
    Straggle(began);
    // An empty step still counts: every worker makes steps_per_epoch clocks.
    const uint64_t skipped = w_.skipped_clocks();
    FERRY_RETURN_IF_ERROR(w_.Clock(position_));
    clocks_to_skip_ += w_.skipped_clocks() - skipped;
    FERRY_RETURN_IF_ERROR(MaybeEvaluate(epoch));
    // At the clock boundary: under bsp the version is the model of these clocks exactly.
    FERRY_RETURN_IF_ERROR(MaybeExportAtClock((epoch - 1) * steps_per_epoch_ + step + 1));
    ShowProgress();
  }
  return Status::Ok();
}

Status WorkerLoop::TrainDealt(uint32_t epoch) {
  // Each worker's items of the pass come as it asks (the reader's deal), so the workers make
  // different numbers of batches: asp pipelines them as usual; bsp/ssp clock each batch, and a
  // worker out of data stops its clocks at the end (Finish), not here (a later pass has more).
  if (o_.consistency.kind == ps::Consistency::kAsp) return TrainPipelined(epoch);
  Batch batch;
  Stepper::Slot slot;
  while (true) {
    batch.Clear();
    FERRY_ASSIGN_OR_RETURN(const size_t n, reader_->Next(o_.batch_size, &batch));
    if (n == 0) return Status::Ok();
    position_ += n;
    FERRY_RETURN_IF_ERROR(step_.Begin(batch, &slot, Stepper::Use::kTrain));
    FERRY_ASSIGN_OR_RETURN(double loss, step_.Finish(&slot, true, nullptr));
    Account(loss, n);
    FERRY_RETURN_IF_ERROR(w_.Clock(position_));
    FERRY_RETURN_IF_ERROR(MaybeEvaluate(epoch));
    ShowProgress();
  }
}

bool WorkerLoop::Leaving() {
  // Asked when the reader wants its next item: a worker that leaves has trained every line it
  // took, and takes no more.
  if (leaving_ || !leave_asked_ || !leave_asked_()) return leaving_;
  if (lead_) {
    if (!refused_leave_) {
      refused_leave_ = true;
      std::fprintf(stderr,
                   "ferry-train: worker 0 does not leave the job: it writes the model at the "
                   "end\n");
    }
    return false;
  }
  if (StreamTraining(o_)) {
    // Its share comes from rank 0's dealer (stream_ranks.h): the word to stop dealing to it. It
    // then reads what it was dealt to the end, as it does its files' last item.
    if (Status s = StopDealingTo(STDIN_FILENO); !s.ok()) {
      if (!refused_leave_) {
        refused_leave_ = true;
        std::fprintf(stderr, "ferry-train: worker %u does not leave the job: %s\n", w_.index(),
                     s.message().c_str());
      }
      return false;
    }
  }
  leaving_ = true;
  std::fprintf(stderr,
               "ferry-train: worker %u leaves the job: it takes no more data and goes once it "
               "trained what it holds\n",
               w_.index());
  return true;
}

Status WorkerLoop::ReadStraggler() {
  // A test hook, for the backup-workers tests (tests/train/backup_workers_test.cc): a real
  // straggler, without a slow machine.
  const char* env = std::getenv("FERRY_TEST_SLOW_WORKER");
  if (env == nullptr || *env == '\0') return Status::Ok();
  unsigned worker = 0;
  double factor = 0;
  char end = 0;
  if (std::sscanf(env, "%u:%lf%c", &worker, &factor, &end) != 2 ||
      !(factor >= 1 && factor <= 100)) {
    return InvalidArgument("FERRY_TEST_SLOW_WORKER='" + std::string(env) +
                           "' is not WORKER:FACTOR (a worker index, a factor 1..100)");
  }
  if (worker == w_.index()) straggle_factor_ = factor;
  return Status::Ok();
}

void WorkerLoop::Straggle(TrainClock::time_point began) {
  if (straggle_factor_ <= 1) return;
  const auto took = TrainClock::now() - began;
  std::this_thread::sleep_for(
      std::chrono::duration_cast<TrainClock::duration>(took * (straggle_factor_ - 1)));
}

void WorkerLoop::ReportSkipped() const {
  if (skipped_batches_ == 0) return;
  // Every worker that skipped says so, --quiet or not: these samples were not trained on.
  std::fprintf(stderr,
               "ferry-train: worker %u skipped %llu batches (%llu samples): backup workers "
               "completed their clocks without it\n",
               w_.index(), static_cast<unsigned long long>(skipped_batches_),
               static_cast<unsigned long long>(skipped_samples_));
}

Status WorkerLoop::TrainPipelined(uint32_t epoch) {
  Batch batches[2];
  Stepper::Slot slots[2];
  int cur = 0;
  FERRY_ASSIGN_OR_RETURN(size_t n, reader_->Next(o_.batch_size, &batches[cur]));
  if (n == 0) return Status::Ok();
  FERRY_RETURN_IF_ERROR(step_.Begin(batches[cur], &slots[cur], Stepper::Use::kTrain));
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
      Status s = step_.Begin(batches[nxt], &slots[nxt], Stepper::Use::kTrain);
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
    if (s.ok()) s = MaybeExport();
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
  FERRY_ASSIGN_OR_RETURN(ReaderOptions ro, ReaderFor(o_.test_files, Side::kAll, /*sharded=*/false));
  FERRY_ASSIGN_OR_RETURN(auto r, Reader::Open(ro));
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
    FERRY_RETURN_IF_ERROR(step_.Begin(b, &slot, Stepper::Use::kScore));
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
  rec.elapsed_s = SecondsSince(start_);
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

}  // namespace ferry::models
