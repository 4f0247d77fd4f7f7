// Reader: options, shard planning, the inline (threads = 1) path and malformed-line policy.
// The threaded path is in reader_threads.cc; both hand out samples in the same order and report
// malformed lines at the same points (see ParsedChunk::bad).
#include "models/data/reader.h"

#include <algorithm>
#include <cstdio>

#include "models/data/hashing.h"
#include "models/data/line_source.h"
#include "models/data/reader_internal.h"

namespace ferry::models {
namespace {

constexpr uint64_t kMaxReported = 10;
constexpr size_t kMinBuffer = 64;
constexpr int kMaxThreads = 64;

Status CheckOptions(const ReaderOptions& o) {
  if (o.files.empty()) return InvalidArgument("no input files given");
  if (o.num_shards == 0) return InvalidArgument("num_shards must be at least 1");
  if (o.shard >= o.num_shards) {
    return InvalidArgument("shard " + std::to_string(o.shard) + " is out of range for " +
                           std::to_string(o.num_shards) + " shards (0-based)");
  }
  if (o.threads < 1 || o.threads > kMaxThreads) {
    return InvalidArgument("threads " + std::to_string(o.threads) + " is out of range 1..64");
  }
  if (o.buffer_bytes < kMinBuffer || o.buffer_bytes > (size_t{1} << 32)) {
    return InvalidArgument("buffer_bytes " + std::to_string(o.buffer_bytes) +
                           " is out of range 64 B .. 4 GiB");
  }
  FERRY_RETURN_IF_ERROR(ValidateHoldout(o.holdout));
  if (o.field_map && o.format != Format::kLibsvm) {
    return InvalidArgument("a field map applies to libsvm input only; " +
                           std::string(FormatName(o.format)) + " lines carry their own fields");
  }
  if (o.field_map && o.field_map->empty()) return InvalidArgument("the field map is empty");
  if (o.deal) {
    if (o.deal_items == 0 || o.deal_items > (1u << 24)) {
      return InvalidArgument("deal_items " + std::to_string(o.deal_items) +
                             " is out of range 1..16777216");
    }
    if (o.threads != 1) {
      return InvalidArgument("dealt input is read by the calling thread: threads must be 1, not " +
                             std::to_string(o.threads));
    }
  }
  return ValidateHashBits(o.hash_bits);
}

internal::ParseConfig ConfigOf(const ReaderOptions& o) {
  return {o.format, o.hash_seed, o.hash_bits, o.buffer_bytes, o.holdout, o.field_map.get()};
}

}  // namespace

Reader::Reader(const ReaderOptions& options) : options_(options) {
  if (!options_.on_malformed) {
    options_.on_malformed = [](const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); };
  }
}

Reader::~Reader() = default;

Result<std::unique_ptr<Reader>> Reader::Open(const ReaderOptions& options) {
  FERRY_RETURN_IF_ERROR(CheckOptions(options));
  std::vector<InputFile> inputs;
  for (const std::string& path : options.files) {
    FERRY_ASSIGN_OR_RETURN(InputFile in, ProbeInput(path));
    inputs.push_back(std::move(in));
  }
  std::vector<Piece> pieces;
  if (!options.deal) pieces = PlanShard(inputs, options.shard, options.num_shards);
  std::unique_ptr<Reader> r(new Reader(options));
  r->first_line_.assign(pieces.size(), -1);
  std::vector<InputFile> planned = options.deal ? inputs : std::vector<InputFile>();
  r->source_ =
      std::make_unique<LineSource>(std::move(inputs), std::move(pieces), options.buffer_bytes);
  if (options.deal) {
    Reader* raw = r.get();
    const uint32_t items = options.deal_items;
    r->source_->SetSupplier([raw, items, planned = std::move(planned)](
                                std::vector<Piece>* out) -> Result<bool> {
      FERRY_ASSIGN_OR_RETURN(const std::optional<uint64_t> item, raw->options_.deal(raw->pass_));
      if (!item) return false;
      if (*item >= items) {
        return InvalidArgument("dealt item " + std::to_string(*item) + " of " +
                               std::to_string(items));
      }
      for (const Piece& p : PlanShard(planned, static_cast<uint32_t>(*item), items)) {
        out->push_back(p);
        raw->first_line_.push_back(-1);
      }
      return true;
    });
  }
  // A line too long for the buffer is never held whole, yet belongs to one side of the split.
  if (options.holdout.Filters()) r->source_->HashOverlongLines(options.holdout.seed);
  FERRY_RETURN_IF_ERROR(r->Start());
  return r;
}

Status Reader::Start() {
  if (options_.threads == 1) return Status::Ok();
  FERRY_ASSIGN_OR_RETURN(pipeline_, internal::ParsePipeline::Start(
                                        source_.get(), ConfigOf(options_), options_.threads));
  return Status::Ok();
}

Status Reader::Rewind() {
  for (const Piece& p : source_->pieces()) {
    if (source_->inputs()[p.file].stream) {
      return InvalidArgument(InputName(source_->inputs()[p.file].path) +
                             " is a stream: it is read once, and cannot be read again");
    }
  }
  pipeline_.reset();  // joins the threads before the source is touched
  chunk_.reset();
  source_->Rewind();
  if (options_.deal) first_line_.clear();  // the next pass's items come as they are dealt
  stats_ = ReaderStats{};
  piece_ = SIZE_MAX;
  piece_lines_ = 0;
  pending_ = {};
  done_ = false;
  failed_ = Status::Ok();
  ++pass_;
  return Start();
}

Status NoSampleError(std::string_view what, const std::vector<std::string>& files,
                     const ReaderStats& stats, const std::string& first_malformed) {
  std::string msg = "no " + std::string(what) + " in ";
  for (size_t i = 0; i < files.size() && i < 3; ++i) msg += (i > 0 ? ", " : "") + files[i];
  if (files.size() > 3) msg += ", ... (" + std::to_string(files.size()) + " files)";
  msg += ": ";
  const uint64_t lines = stats.lines - stats.skipped_other_side;
  if (stats.lines == 0) {
    msg += files.size() == 1 ? "the file is empty" : "the files are empty";
  } else if (lines == 0) {
    msg += std::to_string(stats.lines) + " lines, all on the other side of the held-out split";
  } else {
    msg += std::to_string(lines) + (lines == 1 ? " line, " : " lines, ");
    if (stats.malformed == lines) {
      msg += lines == 1 ? "malformed" : "all malformed";
    } else if (stats.malformed > 0) {
      msg += std::to_string(stats.malformed) + " malformed, the others blank or comments";
    } else {
      msg += lines == 1 ? "blank or a comment" : "all blank or comments";
    }
    if (stats.malformed > 0 && !first_malformed.empty()) {
      msg += " (the first: " + first_malformed + ")";
    }
  }
  return InvalidArgument(msg);
}

Result<std::vector<uint32_t>> ShardsWithoutInput(const std::vector<std::string>& files,
                                                 uint32_t num_shards) {
  std::vector<InputFile> inputs;
  for (const std::string& path : files) {
    FERRY_ASSIGN_OR_RETURN(InputFile in, ProbeInput(path));
    inputs.push_back(std::move(in));
  }
  std::vector<uint32_t> idle;
  for (uint32_t s = 0; s < num_shards; ++s) {
    if (PlanShard(inputs, s, num_shards).empty()) idle.push_back(s);
  }
  return idle;
}

std::string Reader::DescribeShard() const {
  std::string out;
  for (const Piece& p : source_->pieces()) {
    const InputFile& in = source_->inputs()[p.file];
    if (in.gzip) {
      out += in.path + " (gzip, whole file)\n";
    } else {
      out += in.path + " bytes [" + std::to_string(p.begin) + ", " + std::to_string(p.end) + ")\n";
    }
  }
  return out;
}

void Reader::EnterPiece(size_t piece) {
  if (piece != piece_) {
    piece_ = piece;
    piece_lines_ = 0;
  }
}

std::string Reader::Where(uint64_t line_in_piece) {
  const Piece& p = source_->pieces()[piece_];
  const std::string path = InputName(source_->inputs()[p.file].path);
  if (first_line_[piece_] < 0) {
    // Only now, for a report: a shard starting mid-file must count the lines before it.
    Result<uint64_t> first = FirstLineNumber(path, p.begin);
    if (!first.ok()) return path + ":? (line unknown: " + first.status().message() + ")";
    first_line_[piece_] = static_cast<int64_t>(*first);
  }
  return path + ":" + std::to_string(static_cast<uint64_t>(first_line_[piece_]) + line_in_piece);
}

Status Reader::Malformed(uint64_t line_in_piece, const std::string& reason) {
  ++stats_.malformed;
  if (options_.strict) return InvalidArgument(Where(line_in_piece) + ": " + reason);
  if (pass_ > 0 || reported_ > kMaxReported) return Status::Ok();
  if (reported_++ < kMaxReported) {
    options_.on_malformed(Where(line_in_piece) + ": " + reason);
  } else {
    options_.on_malformed("(more malformed lines: counted in the reader's stats, not reported)");
  }
  return Status::Ok();
}

Result<size_t> Reader::Next(size_t max_samples, Batch* batch) {
  if (max_samples == 0) return InvalidArgument("Reader::Next needs max_samples > 0");
  if (!failed_.ok()) return failed_;
  if (batch->offsets.empty()) batch->offsets.push_back(0);
  Result<size_t> r = pipeline_ ? NextThreaded(max_samples, batch) : NextInline(max_samples, batch);
  if (!r.ok()) failed_ = r.status();
  return r;
}

Result<size_t> Reader::NextInline(size_t max_samples, Batch* batch) {
  const internal::ParseConfig config = ConfigOf(options_);
  size_t got = 0;
  while (got < max_samples) {
    if (pending_.empty()) {
      if (done_) break;
      FERRY_ASSIGN_OR_RETURN(const LineSource::Block block, source_->Next());
      if (block.kind == LineSource::Block::Kind::kEnd) {
        done_ = true;
        break;
      }
      EnterPiece(block.piece);
      if (block.kind == LineSource::Block::Kind::kOverlong) {
        ++stats_.lines;
        stats_.bytes += block.bytes;
        const uint64_t index = piece_lines_++;
        if (config.holdout.Filters() && !config.holdout.KeepsHash(block.line_hash)) {
          ++stats_.skipped_other_side;
          continue;
        }
        FERRY_RETURN_IF_ERROR(Malformed(index, internal::OverlongReason(options_.buffer_bytes)));
        continue;
      }
      pending_ = block.text;
      continue;
    }
    size_t consumed;
    const std::string_view line = internal::TakeLine(&pending_, &consumed);
    const uint64_t index = piece_lines_++;
    ++stats_.lines;
    stats_.bytes += consumed;
    const internal::LineFate fate = internal::Triage(config, line);
    if (fate == internal::LineFate::kBlank) continue;
    if (fate == internal::LineFate::kOtherSide) {
      ++stats_.skipped_other_side;
      continue;
    }
    Status s =
        ParseLine(config.format, line, config.seed, config.hash_bits, batch, config.field_map);
    if (!s.ok()) {
      FERRY_RETURN_IF_ERROR(Malformed(index, s.message()));
      continue;
    }
    ++got;
    ++stats_.samples;
    stats_.features += batch->offsets.back() - batch->offsets[batch->offsets.size() - 2];
  }
  return got;
}

Result<size_t> Reader::NextThreaded(size_t max_samples, Batch* batch) {
  size_t got = 0;
  while (got < max_samples) {
    if (!chunk_) {
      if (done_) break;
      chunk_ = pipeline_->Pop();
      if (chunk_->kind == internal::ParsedChunk::Kind::kError) {
        Status s = chunk_->status;
        chunk_.reset();
        return s;
      }
      if (chunk_->kind == internal::ParsedChunk::Kind::kEnd) {
        chunk_.reset();
        done_ = true;
        break;
      }
      EnterPiece(chunk_->piece);
      chunk_first_line_ = piece_lines_;
      piece_lines_ += chunk_->lines;
      stats_.lines += chunk_->lines;
      stats_.bytes += chunk_->bytes;
      stats_.skipped_other_side += chunk_->skipped;
      chunk_cursor_ = 0;
      chunk_bad_ = 0;
    }
    const internal::ParsedChunk& c = *chunk_;
    // Bad lines sitting right after the samples handed out so far: report them now, in the
    // same place relative to the samples as the inline path does.
    while (chunk_bad_ < c.bad.size() && c.bad[chunk_bad_].samples_before == chunk_cursor_) {
      const internal::BadLine& bad = c.bad[chunk_bad_++];
      FERRY_RETURN_IF_ERROR(Malformed(chunk_first_line_ + bad.line, bad.reason));
    }
    const size_t limit =
        chunk_bad_ < c.bad.size() ? c.bad[chunk_bad_].samples_before : c.batch.size();
    const size_t n = std::min(max_samples - got, limit - chunk_cursor_);
    if (n > 0) {
      FERRY_RETURN_IF_ERROR(batch->Append(c.batch, chunk_cursor_, n));
      stats_.samples += n;
      stats_.features += c.batch.offsets[chunk_cursor_ + n] - c.batch.offsets[chunk_cursor_];
      chunk_cursor_ += n;
      got += n;
    }
    if (chunk_cursor_ == c.batch.size() && chunk_bad_ == c.bad.size()) {
      pipeline_->Recycle(std::move(chunk_));
    }
  }
  return got;
}

}  // namespace ferry::models
