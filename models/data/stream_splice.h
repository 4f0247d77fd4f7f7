// Dealing a pipe without copying it (the stream dealer's splice path, stream_dealer.cc).
//
// A stream that arrives through a pipe (`producer | ferry-train --train -`) would otherwise be
// copied twice by the dealer: read() out of the input pipe, write() into a worker's pipe. Here a
// block moves from the input pipe into the worker's pipe with splice(2), which hands over the
// pipe's pages instead of their bytes. Only the block's end must be seen, to cut it after a
// line: tee(2) duplicates the head of the input into a scratch pipe without consuming it, the
// scratch's bytes before the last kTailBytes of the block are dropped into /dev/null (splice
// again: no copy), and the last kTailBytes are read to find the last '\n'. So the dealer copies
// kTailBytes per block instead of every byte twice.
//
// Threading: one owner (the dealing thread). Ownership: the input descriptor is borrowed; the
// scratch pipe and /dev/null are owned.
#pragma once

#include <cstddef>
#include <memory>

#include "models/data/input.h"
#include "transport/status.h"

namespace ferry::models {

// The length of the next spliced block: at most `block` bytes, at most what the input holds
// (`available`) and what the sink's pipe has room for (`room`, less `slack` for the pages a
// split line leaves half-filled); 0 when that is under min(`min_block`, `block`) and under
// `available` (then wait for room). Pure.
size_t SpliceBlockLength(size_t available, size_t room, size_t block, size_t slack,
                         size_t min_block);

class PipeSplicer {
 public:
  // Bytes read per block to find its last line end; a block whose last kTailBytes hold no '\n'
  // (a line longer than that at its end) is left to the copying path.
  static constexpr size_t kTailBytes = 16 << 10;

  // For an input descriptor that is a pipe; nullptr (no error) when it is not one.
  static Result<std::unique_ptr<PipeSplicer>> Open(int input_fd, size_t max_block);

  // Bytes waiting in the input pipe (FIONREAD).
  Result<size_t> Available() const;
  // The end of the last whole line within the first `length` bytes of the input (which holds at
  // least that many): 0 when its last kTailBytes hold no '\n'. Consumes nothing.
  Result<size_t> LastLineEnd(size_t length);
  // Moves up to `n` bytes of the input into the pipe `sink` without blocking: the bytes moved
  // (0: the sink is full). A sink whose reader is gone (EPIPE): kPeerFailure.
  Result<size_t> Move(int sink, size_t n);
  // Drops `n` bytes of the input (which holds them): a block whose sink died.
  Status Discard(size_t n);
  // Reads exactly `n` bytes of the input (which holds them) into dst: the rest of a block that
  // did not fit into its sink's pipe.
  Status ReadExact(char* dst, size_t n);
  // The copying path's read: up to `cap` bytes of the input into dst, cut after the last '\n'
  // they hold (all of them when they hold none), so the read buffer empties at a line end and
  // blocks can be spliced again. 0 with *ended: the input is over (every writer closed it).
  Result<size_t> ReadCut(char* dst, size_t cap, bool* ended);

 private:
  PipeSplicer(int in, Fd scratch_r, Fd scratch_w, Fd null)
      : in_(in),
        scratch_r_(std::move(scratch_r)),
        scratch_w_(std::move(scratch_w)),
        null_(std::move(null)) {}
  Status DropScratch(size_t n);
  // Reads exactly n bytes of the scratch pipe (which holds them) into dst.
  Status ReadScratch(char* dst, size_t n);

  int in_;
  Fd scratch_r_, scratch_w_;  // the tee'd head of the input, then its tail read
  Fd null_;                   // /dev/null: where the head of the scratch goes
};

// Bytes a pipe's write end takes before it is full: its capacity (F_GETPIPE_SZ, `capacity`)
// less what is queued (FIONREAD).
Result<size_t> PipeRoom(int fd, size_t capacity);

}  // namespace ferry::models
