// LineSource: the lines of one shard of a list of inputs, streamed through a fixed buffer.
//
// Sharding (PlanShard) works like Hadoop input splits. The uncompressed inputs are laid end to
// end and their total size T is cut into num_shards byte ranges [T*s/n, T*(s+1)/n). A line
// belongs to the shard whose range holds its first byte; a shard reads on past its range end to
// finish its last line, and a shard whose range starts inside a line skips that line (its owner
// reads it). So every line is read by exactly one shard, and no shard reads anything twice.
// Gzip inputs and streams (input.h) cannot be entered in the middle: each is read whole, by
// shard (g mod n) for the g-th gzip or stream input of the list.
//
// Memory: one buffer of buffer_bytes (plus 64 KiB of compressed input when reading gzip). A line
// longer than the buffer is skipped and reported as an kOverlong block.
//
// Thread-safety: one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "models/data/holdout.h"
#include "models/data/input.h"
#include "transport/status.h"

namespace ferry::models {

// The part of one input a shard reads: the lines starting in bytes [begin, end) (gzip: the
// whole file, begin 0 and end UINT64_MAX).
struct Piece {
  size_t file = 0;  // index into the inputs
  uint64_t begin = 0;
  uint64_t end = 0;
};

// The pieces of shard `shard` (< num_shards) in input order. Pure function.
std::vector<Piece> PlanShard(const std::vector<InputFile>& inputs, uint32_t shard,
                             uint32_t num_shards);

class LineSource {
 public:
  struct Block {
    enum class Kind { kLines, kOverlong, kEnd };
    Kind kind = Kind::kEnd;
    size_t piece = 0;  // index into the pieces
    // kLines: one or more whole lines, each ending in '\n' except the last line of a file that
    // has none. Valid until the next call of Next() or Rewind().
    std::string_view text;
    uint64_t bytes = 0;      // kLines: text.size(); kOverlong: bytes of the skipped line
    uint64_t line_hash = 0;  // kOverlong after HashOverlongLines: LineHash of the skipped line
  };

  // buffer_bytes >= 2. Opens nothing yet: files are opened piece by piece.
  LineSource(std::vector<InputFile> inputs, std::vector<Piece> pieces, size_t buffer_bytes);
  ~LineSource();
  LineSource(const LineSource&) = delete;
  LineSource& operator=(const LineSource&) = delete;

  // The next block; kEnd (repeatedly) after the last piece. Errors name the file.
  Result<Block> Next();
  // Back to the first line of the first piece; with a supplier, the pieces are dropped and the
  // supplier asked again.
  void Rewind();
  // Pieces on demand: whenever the pieces run out, Next() calls `more` (on its own thread), which
  // appends the next pieces to *out and returns true, or returns false: the end (kEnd until
  // Rewind). Its error fails Next().
  using Supplier = std::function<Result<bool>(std::vector<Piece>* out)>;
  void SetSupplier(Supplier more) { supplier_ = std::move(more); }
  // From now on, kOverlong blocks carry the LineHash (holdout.h) of the line they skip, with
  // this seed: the held-out split places those lines too, though they are never held whole.
  void HashOverlongLines(uint64_t seed);

  const std::vector<InputFile>& inputs() const { return inputs_; }
  const std::vector<Piece>& pieces() const { return pieces_; }

 private:
  enum class Mode { kSkipFirst, kLines, kDropLong };
  Status OpenPiece();
  void FinishPiece();
  Status Fill();

  std::vector<InputFile> inputs_;
  std::vector<Piece> pieces_;
  Supplier supplier_;
  bool supplied_all_ = false;  // the supplier said there is no more (until Rewind)
  std::unique_ptr<char[]> buffer_;
  size_t capacity_;
  size_t piece_ = 0;
  std::unique_ptr<ByteStream> stream_;  // null between pieces
  Mode mode_ = Mode::kLines;
  size_t head_ = 0;  // buffer_[head_, tail_) holds unread bytes
  size_t tail_ = 0;
  uint64_t pos_ = 0;      // file offset of buffer_[head_]
  uint64_t dropped_ = 0;  // bytes of the overlong line being skipped
  bool eof_ = false;
  std::unique_ptr<StreamingLineHash> overlong_hash_;  // null unless HashOverlongLines
  uint64_t overlong_seed_ = 0;
};

}  // namespace ferry::models
