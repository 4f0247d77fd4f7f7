#include "models/data/line_source.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace ferry::models {
namespace {

constexpr uint64_t kWholeFile = std::numeric_limits<uint64_t>::max();

const char* FindNewline(const char* p, size_t n) {
  return static_cast<const char*>(std::memchr(p, '\n', n));
}
const char* FindLastNewline(const char* p, size_t n) {
  return static_cast<const char*>(memrchr(p, '\n', n));
}

}  // namespace

std::vector<Piece> PlanShard(const std::vector<InputFile>& inputs, uint32_t shard,
                             uint32_t num_shards) {
  uint64_t total = 0;
  for (const InputFile& in : inputs) {
    if (!in.gzip && !in.stream) total += in.size;
  }
  // floor(total * s / n) without overflowing 64 bits: total = q n + r gives q s + floor(r s / n),
  // and r s < n^2 <= 2^64.
  const auto cut = [&](uint64_t s) {
    return total / num_shards * s + total % num_shards * s / num_shards;
  };
  const uint64_t lo = cut(shard);
  const uint64_t hi = cut(uint64_t{shard} + 1);
  std::vector<Piece> pieces;
  uint64_t offset = 0;  // of the current plain file in the concatenation
  uint64_t whole_index = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const InputFile& in = inputs[i];
    if (in.gzip || in.stream) {
      if (whole_index++ % num_shards == shard) pieces.push_back({i, 0, kWholeFile});
      continue;
    }
    const uint64_t b = std::max(lo, offset);
    const uint64_t e = std::min(hi, offset + in.size);
    if (b < e) pieces.push_back({i, b - offset, e - offset});
    offset += in.size;
  }
  return pieces;
}

LineSource::LineSource(std::vector<InputFile> inputs, std::vector<Piece> pieces,
                       size_t buffer_bytes)
    : inputs_(std::move(inputs)),
      pieces_(std::move(pieces)),
      buffer_(new char[buffer_bytes]),
      capacity_(buffer_bytes) {}

LineSource::~LineSource() = default;

void LineSource::Rewind() {
  stream_.reset();
  piece_ = 0;
  if (supplier_) {
    pieces_.clear();
    supplied_all_ = false;
  }
}

void LineSource::HashOverlongLines(uint64_t seed) {
  overlong_hash_ = std::make_unique<StreamingLineHash>();
  overlong_seed_ = seed;
}

Status LineSource::OpenPiece() {
  const Piece& piece = pieces_[piece_];
  // A shard starting inside a file starts one byte early: if that byte is the '\n' ending the
  // previous shard's last line, the line at `begin` is ours; otherwise we are inside a line that
  // belongs to the previous shard and skip it (kSkipFirst).
  const uint64_t start = piece.begin > 0 ? piece.begin - 1 : 0;
  FERRY_ASSIGN_OR_RETURN(stream_, OpenStream(inputs_[piece.file], start));
  mode_ = piece.begin > 0 ? Mode::kSkipFirst : Mode::kLines;
  head_ = tail_ = 0;
  pos_ = start;
  dropped_ = 0;
  eof_ = false;
  return Status::Ok();
}

void LineSource::FinishPiece() {
  stream_.reset();
  ++piece_;
}

// Moves the unread bytes to the front and reads more behind them.
Status LineSource::Fill() {
  if (head_ > 0) {
    std::memmove(buffer_.get(), buffer_.get() + head_, tail_ - head_);
    tail_ -= head_;
    head_ = 0;
  }
  FERRY_ASSIGN_OR_RETURN(const size_t n, stream_->Read(buffer_.get() + tail_, capacity_ - tail_));
  if (n == 0) eof_ = true;
  tail_ += n;
  return Status::Ok();
}

Result<LineSource::Block> LineSource::Next() {
  while (true) {
    if (piece_ == pieces_.size()) {
      if (!supplier_ || supplied_all_) break;
      FERRY_ASSIGN_OR_RETURN(const bool more, supplier_(&pieces_));
      if (!more) supplied_all_ = true;
      continue;
    }
    if (!stream_) FERRY_RETURN_IF_ERROR(OpenPiece());
    const uint64_t end = pieces_[piece_].end;
    char* const buf = buffer_.get();
    const size_t avail = tail_ - head_;

    if (mode_ == Mode::kSkipFirst || mode_ == Mode::kDropLong) {
      // Discard through the next '\n' (or to end of file).
      const char* nl = FindNewline(buf + head_, avail);
      const size_t n = nl ? static_cast<size_t>(nl - (buf + head_)) + 1 : avail;
      if (mode_ == Mode::kDropLong && overlong_hash_) {
        overlong_hash_->Update(std::string_view(buf + head_, nl ? n - 1 : n));
      }
      head_ += n;
      pos_ += n;
      dropped_ += n;
      if (!nl && !eof_) {
        FERRY_RETURN_IF_ERROR(Fill());
        continue;
      }
      const bool was_long = mode_ == Mode::kDropLong;
      mode_ = Mode::kLines;
      if (was_long) {
        Block b{Block::Kind::kOverlong, piece_, {}, dropped_};
        if (overlong_hash_) b.line_hash = overlong_hash_->Finish();
        dropped_ = 0;
        return b;
      }
      dropped_ = 0;
      continue;
    }

    if (pos_ >= end || (eof_ && avail == 0)) {
      FinishPiece();
      continue;
    }
    const char* last = FindLastNewline(buf + head_, avail);
    if (!last) {
      if (eof_) {  // the file's last line has no '\n'
        Block b{Block::Kind::kLines, piece_, std::string_view(buf + head_, avail), avail};
        head_ = tail_;
        pos_ += avail;
        return b;
      }
      if (head_ == 0 && tail_ == capacity_) {
        // A line longer than the whole buffer: skip it rather than grow without bound.
        mode_ = Mode::kDropLong;
        if (overlong_hash_) overlong_hash_->Reset(overlong_seed_);
        continue;
      }
      FERRY_RETURN_IF_ERROR(Fill());
      continue;
    }
    size_t len = static_cast<size_t>(last - (buf + head_)) + 1;
    if (pos_ + len > end) {
      // The block runs past the range: stop after the line that starts before `end`, i.e. at
      // the first '\n' at or after offset end - 1 (there is one: `last` is such a '\n').
      const size_t from = static_cast<size_t>(end - 1 - pos_);
      len = static_cast<size_t>(FindNewline(buf + head_ + from, avail - from) - (buf + head_)) + 1;
    }
    Block b{Block::Kind::kLines, piece_, std::string_view(buf + head_, len), len};
    head_ += len;
    pos_ += len;
    return b;
  }
  return Block{};
}

}  // namespace ferry::models
