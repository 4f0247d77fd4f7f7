// Where a StreamDealer (stream_dealer.h) reads: one interface, three sources today, and the place
// a queue (Kafka, say) would go as one more source without touching the dealer or the trainer.
//
//   pipe    "-" (stdin), a FIFO, a socket: bytes as they come; the end when every writer closed
//   dir     --follow DIR: the regular files of DIR, in name order, each read once, front to back;
//           files already there first, then each new one as it appears. A file counts once it is
//           in DIR under its final name: write it elsewhere (or as a name starting with '.') and
//           rename(2) it into place, which is atomic; a file still being written in place would
//           be read half-written. Names starting with '.' are never read. A file that ends
//           without '\n' is given one. Never ends by itself.
//   tail    --follow FILE: the bytes of FILE from its start, then those appended (tail -f);
//           a FILE that shrinks (truncated, rotated) is an error. Never ends by itself.
//
// Threading: one thread (the dealer's). Blocking: never: Read returns what there is.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "models/data/input.h"
#include "transport/status.h"

namespace ferry::models {

class StreamInput {
 public:
  virtual ~StreamInput() = default;
  // A descriptor that becomes readable (POLLIN) when there may be more to read; -1: none.
  virtual int poll_fd() const = 0;
  // Whether Read has bytes now without waiting for poll_fd (a file with unread bytes).
  virtual bool ready() = 0;
  // poll_fd was readable: take its notification (drain, rescan).
  virtual Status Woken() = 0;
  // Up to `cap` (> 0) bytes. 0 with *ended = true: the input is over; 0 otherwise: nothing now.
  virtual Result<size_t> Read(char* dst, size_t cap, bool* ended) = 0;
  // Where the input stands, for messages: "stdin", "DIR/part-0003 (2 of 5 files read)".
  virtual std::string Where() const = 0;
  // The descriptor Read reads when the input is one descriptor read in order (standard input, a
  // named pipe): the dealer may splice(2) from it when it is a pipe. -1: none.
  virtual int splice_fd() const { return -1; }
};

enum class FollowMode { kNone, kDir, kTail };

// Which part of a followed input one reader takes (workers that each follow it, under bsp):
// kDir: of the files in name order, the index-th, then every count-th after it. With count > 1 a
// file that appears after a name sorting after it was seen is an error: it would move every
// later file to another share.
// kTail: of the file's lines in blocks of block_lines, the index-th block, then every count-th
// (worker w's batches are blocks w, w + W, ...). Only whole lines are given: a last line without
// '\n' is still arriving.
struct FollowShare {
  uint32_t index = 0;
  uint32_t count = 1;
  uint32_t block_lines = 1;  // kTail
};

// A tailed file's share (kTail, count > 1): appends to *out the whole lines of `data` that are
// the share's; *line is the file's line index of data's first line, advanced past every whole
// line. Returns the bytes of data that were whole lines (the rest is a line still arriving).
// Pure.
size_t KeepSharedLines(std::string_view data, FollowShare share, uint64_t* line, std::string* out);

// kNone: `path` must be a stream (IsStreamInput); kDir: a directory (only the files of `share`);
// kTail: a regular file. Errors name the path.
Result<std::unique_ptr<StreamInput>> OpenStreamInput(const std::string& path, FollowMode mode,
                                                     FollowShare share = {});

// The files of a followed directory to read next: the names in `listing` that are not in
// `seen`, do not start with '.', in name order. Pure.
std::vector<std::string> NewFollowedFiles(const std::vector<std::string>& listing,
                                          const std::set<std::string>& seen);

}  // namespace ferry::models
