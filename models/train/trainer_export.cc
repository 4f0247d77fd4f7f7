// Worker 0's exports (worker_loop.h): the model file at the end (--model-out) and the export
// directory (--export-dir): the model published as versions while it trains
// (models/io/export_writer.h), and once more at the end, from the same checkpoint as the file.
//
// When a version is taken, and why it is safe there:
//   bsp  after worker 0's Clock(c) returned: every server applied the clocks < c + 1 and no
//        worker's push of clock c + 1 is applied before worker 0 clocks again, so the checkpoint
//        is the model at the boundary exactly, with no collective (the others wait at their
//        next boundary meanwhile);
//   ssp  the same point: worker 0's pushes are applied, the others' may run up to S clocks ahead;
//   asp  after a batch of worker 0 (TrainPipelined) or a window's round (the stream loop): the
//        others keep pushing; the version is whatever the servers hold when they get the command.
// Only worker 0 calls Worker::Checkpoint (it waits for worker 0's own requests first); the
// decision is worker 0's alone, so by time or by samples nobody else needs to agree.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "models/eval/calibration.h"
#include "models/train/auto_settings.h"
#include "models/train/export.h"
#include "models/train/worker_loop.h"

namespace ferry::models {

Status WorkerLoop::OpenExportDir() {
  if (!lead_ || o_.exports.dir.empty()) return Status::Ok();
  ExportDirOptions x;
  x.base_every = o_.exports.base_every;
  x.keep_bases = o_.exports.keep_bases;
  auto w = ExportDirWriter::Open(o_.exports.dir, x);
  if (!w.ok()) return w.status().Annotate("--export-dir " + o_.exports.dir);
  exporter_.emplace(std::move(*w));
  last_export_ = TrainClock::now();
  next_export_samples_ = o_.exports.every_samples;
  return Status::Ok();
}

uint64_t WorkerLoop::ExportSamples() const {
  // A stream: the windows' merged count; a pass: worker 0's own, scaled by the workers.
  return StreamTraining(o_) ? window_total_ : samples_ * w_.num_workers();
}

Status WorkerLoop::MaybeExport() {
  if (!exporter_) return Status::Ok();
  const ExportOptions& x = o_.exports;
  const uint64_t samples = ExportSamples();
  const bool by_samples = x.every_samples > 0 && samples >= next_export_samples_;
  const bool by_time = x.every_seconds > 0 && SecondsSince(last_export_) >= x.every_seconds;
  if (!by_samples && !by_time) return Status::Ok();
  while (x.every_samples > 0 && next_export_samples_ <= samples) {
    next_export_samples_ += x.every_samples;
  }
  return TakeVersion("");
}

ModelParams WorkerLoop::ExportParams() const {
  ModelParams params = DescribeModel(o_, def_);
  if (offset_ != 0) params[std::string(kLogitOffsetParam)] = FormatOffset(offset_);
  return params;
}

Status WorkerLoop::TakeVersion(const std::string& from_dir) {
  const TrainClock::time_point t0 = TrainClock::now();
  const ModelParams params = ExportParams();
  std::string dir = from_dir;
  Status s;
  if (dir.empty()) {
    // The servers write their shards into the export directory (a file system they all reach,
    // as for --model-out); the shards go once the version is written.
    dir = o_.exports.dir + "/.shards." + std::to_string(getpid());
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return IoError("create " + dir + " for an export", errno);
    }
    s = w_.Checkpoint(dir);
  }
  Result<ExportEntry> e = Internal("no checkpoint");
  if (s.ok()) {
    auto model = CheckpointModel(dir, w_.job(), def_, params);
    e = model.ok() ? exporter_->Publish(*model, ExportSamples())
                   : Result<ExportEntry>(model.status());
  } else {
    e = s;
  }
  if (from_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  if (!e.ok()) return e.status().Annotate("export a version into " + o_.exports.dir);
  last_export_ = TrainClock::now();
  const double ms = 1e3 * std::chrono::duration<double>(last_export_ - t0).count();
  export_ms_ += ms;
  std::error_code ec;
  const uintmax_t bytes = std::filesystem::file_size(o_.exports.dir + "/" + e->file, ec);
  Log("ferry-train: exported version " + std::to_string(e->version) + " (" +
      (e->base ? "base" : "delta") + ", " + std::to_string(ec ? 0 : bytes) + " bytes, " +
      Figure("%.1f", ms) + " ms) to " + o_.exports.dir + "/" + e->file);
  return Status::Ok();
}

Status WorkerLoop::ExportKept(bool current) {
  if (!o_.model_out.empty() || exporter_) FERRY_RETURN_IF_ERROR(Export(current ? "" : kept_.dir));
  if (!current && o_.checkpoint_dir.empty() && !kept_.dir.empty() && kept_.ours) {
    std::error_code ec;
    std::filesystem::remove_all(kept_.dir, ec);
  }
  return Status::Ok();
}

Status WorkerLoop::Export(const std::string& from_dir) {
  const ModelParams params = ExportParams();
  if (!from_dir.empty()) {
    Status s = o_.model_out.empty() ? Status::Ok()
                                    : ExportCheckpoint(from_dir, w_.job(), def_, params,
                                                       o_.model_out, o_.model_format);
    if (!s.ok()) return s.Annotate("export the kept model to " + o_.model_out);
    return exporter_ ? TakeVersion(from_dir) : Status::Ok();
  }
  // The servers write their shards next to the model file (a file system they all reach), this
  // worker turns them into the model (and the export directory's last version), and the shards
  // go.
  const std::string dir = (o_.model_out.empty() ? o_.exports.dir + "/" : o_.model_out) +
                          ".shards." + std::to_string(getpid());
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return IoError("create " + dir + " for the model export", errno);
  }
  Status s = w_.Checkpoint(dir);
  if (s.ok() && !o_.model_out.empty()) {
    s = ExportCheckpoint(dir, w_.job(), def_, params, o_.model_out, o_.model_format);
    if (!s.ok()) s = s.Annotate("export the model to " + o_.model_out);
  }
  if (s.ok() && exporter_) s = TakeVersion(dir);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return s;
}

}  // namespace ferry::models
