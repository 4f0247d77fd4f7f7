// Internals of Reader shared by the inline path (reader.cc) and the threaded one
// (reader_threads.cc). Not part of the public API.
//
// Threaded parsing, drawn as the chunks flow:
//
//   reading thread:  LineSource -> chunk #0, #1, #2, ...      (whole lines, <= chunk_bytes)
//                     chunk #k goes to in[k % T]               (T parsing threads, queues of 2)
//   parser t:        in[t] -> ParseChunk -> out[t]
//   Next():          out[0], out[1], ..., out[T-1], out[0], ...  (the same round robin)
//
// Because chunk #k is always taken from out[k % T], chunks come back in reading order whatever
// the parsers' speeds: the output is that of one thread. End of data and errors travel as
// chunks too, so they arrive in order behind the data before them.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/data/batch.h"
#include "models/data/field_map.h"
#include "models/data/holdout.h"
#include "models/data/line_source.h"
#include "models/data/parse.h"
#include "transport/status.h"

namespace ferry::models::internal {

struct ParseConfig {
  Format format = Format::kLibsvm;
  uint64_t seed = 0;
  uint32_t hash_bits = 0;
  size_t buffer_bytes = 0;
  Holdout holdout;
  const FieldMap* field_map = nullptr;  // owned by the Reader's options, outlives the pipeline
};

// A malformed line of a chunk: its index among the chunk's lines, how many of the chunk's
// samples precede it (so Next reports it exactly where threads = 1 would) and why.
struct BadLine {
  uint64_t line = 0;
  size_t samples_before = 0;
  std::string reason;
};

struct ParsedChunk {
  enum class Kind { kData, kEnd, kError };
  Kind kind = Kind::kData;
  size_t piece = 0;
  std::string text;            // raw lines; cleared once parsed
  bool overlong = false;       // one line that did not fit the read buffer (text is empty)
  uint64_t overlong_hash = 0;  // its LineHash (LineSource::HashOverlongLines)
  uint64_t bytes = 0;          // raw bytes the chunk stands for
  uint64_t lines = 0;          // lines in the chunk, blank, malformed and skipped included
  uint64_t skipped = 0;        // lines of the other side of the held-out split
  Batch batch;
  std::vector<BadLine> bad;
  Status status;  // kError
};

// Cuts the first line off *text and returns it without its '\n'; *consumed counts the '\n'.
inline std::string_view TakeLine(std::string_view* text, size_t* consumed) {
  const char* nl = static_cast<const char*>(std::memchr(text->data(), '\n', text->size()));
  const size_t len = nl ? static_cast<size_t>(nl - text->data()) : text->size();
  *consumed = nl ? len + 1 : len;
  const std::string_view line = text->substr(0, len);
  text->remove_prefix(*consumed);
  return line;
}

std::string OverlongReason(size_t buffer_bytes);

// What becomes of one line, the same for both paths: blank lines first (they stay blank on
// both sides of a split), then the split, then the parser.
enum class LineFate { kBlank, kOtherSide, kParse };
inline LineFate Triage(const ParseConfig& config, std::string_view line) {
  if (IsBlankLine(config.format, line)) return LineFate::kBlank;
  if (config.holdout.Filters() && !config.holdout.Keeps(line)) return LineFate::kOtherSide;
  return LineFate::kParse;
}

// Parses every line of chunk->text into chunk->batch / lines / skipped / bad, then clears the
// text.
void ParseChunk(const ParseConfig& config, ParsedChunk* chunk);

class ParsePipeline {
 public:
  // Starts the reading thread and `threads` (>= 2) parsers over `source`, which must outlive
  // the pipeline and is not touched by anyone else meanwhile.
  static Result<std::unique_ptr<ParsePipeline>> Start(LineSource* source, const ParseConfig& config,
                                                      int threads);
  // Cancels the threads (unblocking them) and joins them.
  ~ParsePipeline();

  // The next chunk in reading order (kData, then one kEnd or kError). Blocks.
  std::unique_ptr<ParsedChunk> Pop();
  // Hands a chunk back once its samples are copied out: its buffers keep their capacity for
  // the next chunks (fresh multi-megabyte vectors per chunk cost more in page faults and
  // regrowth copies than the parsing itself).
  void Recycle(std::unique_ptr<ParsedChunk> chunk);

  struct State;

 private:
  explicit ParsePipeline(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace ferry::models::internal
