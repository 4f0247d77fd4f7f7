// Reader: streams minibatches out of LIBSVM, Criteo or libffm files (plain or gzip).
//
//   ReaderOptions o;
//   o.format = Format::kCriteo;
//   o.files = {"day_0.gz", "day_1.gz"};
//   o.shard = rank; o.num_shards = world;  o.threads = 2;
//   FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Reader> r, Reader::Open(o));
//   Batch batch;
//   for (;;) {
//     batch.Clear();
//     FERRY_ASSIGN_OR_RETURN(size_t n, r->Next(4096, &batch));
//     if (n == 0) break;  // end of this shard's data; r->Rewind() starts the next epoch
//     Train(batch);
//   }
//
// Sharding: the uncompressed inputs are cut into num_shards byte ranges like Hadoop input
// splits; a line belongs to the shard where it starts, so the shards together read every line
// exactly once. Gzip files cannot be split: each is read whole by one shard, round-robin by file
// (the g-th gzip file of `files` goes to shard g mod num_shards), so balance needs at least as
// many gzip files as shards. Files are recognised as gzip by their magic bytes, not their name.
//
// Dealt input (options.deal, instead of shard/num_shards): the inputs are cut into deal_items
// items as PlanShard cuts shards (an item's lines are those starting in its byte range; a gzip
// or stream input is one item's, whole), and the reader reads the items deal(pass) hands it, in
// the order it hands them, asking for the next one each time it has read the last (inside
// Next, on the calling thread; threads must be 1). nullopt ends the pass. pass is 0 for the
// first pass, 1 after the first Rewind, and so on. So a pass's items dealt among several
// readers (ps::Worker::TakeWork: each item to one worker) are every line exactly once, however
// many readers take part and whenever one stops asking: a reader that stops asking has read
// every item it took once Next returned 0. (Stopping early: a deal that returns nullopt from
// then on.)
//
// Order: samples come in file order, then line order. threads > 1 parses chunks in parallel
// and yields exactly the samples, in exactly the order, of threads = 1.
//
// Malformed lines are skipped and counted (stats().malformed). The first 10 of a reader's first
// pass are reported to on_malformed as "FILE:LINE: reason" (default: stderr), later ones only
// counted. With strict = true the first malformed line fails Next() with InvalidArgument
// "FILE:LINE: reason". A line longer than buffer_bytes is malformed ("raise buffer_bytes").
// Blank lines (and comment-only lines in LIBSVM/libffm) are neither samples nor errors.
//
// Held-out split (options.holdout, holdout.h): a line is held out iff a seeded hash of its bytes
// maps below holdout.fraction; the reader keeps one side (keep = kRest for training, kHeldOut
// for validation) and skips the lines of the other before parsing them. Skipped lines are
// counted in stats().skipped_other_side and are neither samples nor malformed (a malformed line
// is reported by the reader of its side only, also one too long for the buffer). The split
// depends on the line's bytes only: the two sides over all shards are every sample exactly once,
// whatever the sharding, threads, buffer size or gzip. fraction 0: no split, every line is on
// the kRest side.
//
// Field map (options.field_map, field_map.h; LIBSVM only): the fields of LIBSVM features come
// from the map instead of being 0; an index the map does not cover makes the line malformed.
//
// Memory: bounded, whatever the file sizes: one read buffer of buffer_bytes (+64 KiB of
// compressed input for gzip); with threads > 1 about buffer_bytes more of raw text in flight
// plus its parsed form.
//
// Threading and lifetime: a Reader is used by one thread at a time. With threads > 1 it owns a
// reading thread and `threads` parsing threads, started by Open/Rewind and joined by Rewind and
// the destructor. Next() blocks while the parsers catch up. on_malformed is called from the
// thread calling Next().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/data/batch.h"
#include "models/data/field_map.h"
#include "models/data/holdout.h"
#include "models/data/parse.h"
#include "transport/status.h"

namespace ferry::models {

struct ReaderOptions {
  Format format = Format::kLibsvm;
  std::vector<std::string> files;  // read in this order; at least one
  uint32_t shard = 0;              // 0 .. num_shards - 1
  uint32_t num_shards = 1;
  bool strict = false;            // the first malformed line is an error instead of being skipped
  int threads = 1;                // parsing threads, 1..64 (1: parse in the caller's thread)
  uint64_t hash_seed = 0;         // models/data/hashing.h
  uint32_t hash_bits = 0;         // 0 (all 64 bits) or 8..64
  size_t buffer_bytes = 4 << 20;  // read buffer; also the longest line accepted (>= 64)
  std::function<void(const std::string&)> on_malformed;  // default: a line on stderr
  // Held-out split (holdout.h): which side of it this reader keeps. Default: no split.
  using Holdout = models::Holdout;
  Holdout holdout;
  // LIBSVM only (Open refuses it with another format): fields of the features by index.
  // Shared, immutable; the reader keeps a reference for its lifetime.
  std::shared_ptr<const FieldMap> field_map;
  // Dealt input (above): the next item (< deal_items) of pass `pass`, or nullopt at its end.
  std::function<Result<std::optional<uint64_t>>(uint64_t pass)> deal;
  uint32_t deal_items = 0;  // 1 .. 2^24 with `deal`
};

// Counters of the current pass (reset by Rewind).
struct ReaderStats {
  uint64_t lines = 0;      // lines read, including blank and malformed ones
  uint64_t samples = 0;    // samples returned by Next
  uint64_t malformed = 0;  // lines skipped as malformed
  uint64_t features = 0;   // features in the returned samples
  uint64_t bytes = 0;      // uncompressed bytes of the lines read
  // Lines left to the other side of the held-out split (included in `lines`; never blank).
  uint64_t skipped_other_side = 0;
};

class LineSource;  // line_source.h
namespace internal {
class ParsePipeline;  // reader_internal.h
struct ParsedChunk;
}  // namespace internal

class Reader {
 public:
  // Checks the options, probes every file (missing, unreadable or not a regular file: IoError or
  // InvalidArgument naming it) and plans this shard. Reads no data yet.
  static Result<std::unique_ptr<Reader>> Open(const ReaderOptions& options);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // Appends up to max_samples (> 0) samples to *batch and returns how many; 0 means the end of
  // this shard's data (and stays 0 until Rewind). Errors (I/O, corrupt gzip, strict mode) are
  // sticky until Rewind; the batch may then hold part of the samples of the failed call.
  Result<size_t> Next(size_t max_samples, Batch* batch);

  // Starts the next pass at the first line of this shard and resets stats().
  Status Rewind();

  const ReaderStats& stats() const { return stats_; }
  // One line per piece this shard reads: "FILE bytes [B, E)" or "FILE (gzip, whole file)".
  std::string DescribeShard() const;

 private:
  explicit Reader(const ReaderOptions& options);
  Result<size_t> NextInline(size_t max_samples, Batch* batch);
  Result<size_t> NextThreaded(size_t max_samples, Batch* batch);
  Status Start();
  void EnterPiece(size_t piece);
  Status Malformed(uint64_t line_in_piece, const std::string& reason);
  std::string Where(uint64_t line_in_piece);

  ReaderOptions options_;
  ReaderStats stats_;
  // Declared before pipeline_: the pipeline's threads read from the source, so the source must
  // outlive them (members are destroyed in reverse order).
  std::unique_ptr<LineSource> source_;
  std::vector<int64_t> first_line_;  // per piece: number of its first line, -1 until needed
  size_t piece_ = SIZE_MAX;          // piece of the lines being consumed
  uint64_t piece_lines_ = 0;         // lines of that piece consumed so far
  uint64_t reported_ = 0;            // malformed lines reported to on_malformed
  uint64_t pass_ = 0;                // 0 during the first pass
  bool done_ = false;
  Status failed_;
  // threads == 1: the unparsed rest of the current block.
  std::string_view pending_;
  // threads > 1.
  std::unique_ptr<internal::ParsePipeline> pipeline_;
  std::unique_ptr<internal::ParsedChunk> chunk_;  // the parsed chunk being handed out
  size_t chunk_cursor_ = 0;                       // samples of chunk_ handed out
  size_t chunk_bad_ = 0;                          // bad lines of chunk_ handled
  uint64_t chunk_first_line_ = 0;                 // line_in_piece of chunk_'s first line
};

// The error for files that gave no sample in a whole pass, from the reader's stats of that pass
// and the first malformed line it reported ("" if none): InvalidArgument
//   "no training sample in a.svm: 200 lines, all malformed (the first: a.svm:1: label 'x')"
// or "...: the file is empty", "...: 3 lines, all blank or comments". `what` names the samples.
Status NoSampleError(std::string_view what, const std::vector<std::string>& files,
                     const ReaderStats& stats, const std::string& first_malformed);

// The shards of num_shards that a Reader of `files` gives no piece of input to (probes the files;
// reads no data). Only gzip files leave a shard without a piece: each is read whole by one shard,
// while plain bytes are cut into every shard.
Result<std::vector<uint32_t>> ShardsWithoutInput(const std::vector<std::string>& files,
                                                 uint32_t num_shards);

}  // namespace ferry::models
