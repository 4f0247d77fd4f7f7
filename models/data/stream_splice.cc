// The dealer's splice path (stream_splice.h).
#include "models/data/stream_splice.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ferry::models {

namespace {

// Reads exactly n bytes of fd, which holds them.
Status ReadFull(int fd, char* dst, size_t n, const char* what) {
  size_t got = 0;
  while (got < n) {
    const ssize_t k = ::read(fd, dst + got, n - got);
    if (k > 0) {
      got += static_cast<size_t>(k);
    } else if (k < 0 && errno == EINTR) {
      continue;
    } else {
      return IoError(what, k == 0 ? EIO : errno);
    }
  }
  return Status::Ok();
}

// Drops n bytes of the pipe `from`, which holds them, into /dev/null: no byte copied.
Status SpliceToNull(int from, int null, size_t n, const char* what) {
  while (n > 0) {
    const ssize_t k = ::splice(from, nullptr, null, nullptr, n, SPLICE_F_NONBLOCK);
    if (k > 0) {
      n -= static_cast<size_t>(k);
    } else if (k < 0 && errno == EINTR) {
      continue;
    } else {
      return IoError(what, k == 0 ? EIO : errno);
    }
  }
  return Status::Ok();
}

}  // namespace

size_t SpliceBlockLength(size_t available, size_t room, size_t block, size_t slack,
                         size_t min_block) {
  const size_t fits = room > slack ? room - slack : 0;
  const size_t n = std::min({available, fits, block});
  // Under min_block (or the block size, when smaller), wait for room rather than splice a
  // sliver: each block costs four system calls and one read of its tail, whatever its length.
  // Unless the input holds less: then that is all there is.
  if (n < std::min(min_block, block) && n < available) return 0;
  return n;
}

Result<std::unique_ptr<PipeSplicer>> PipeSplicer::Open(int input_fd, size_t max_block) {
  struct stat st;
  if (input_fd < 0 || ::fstat(input_fd, &st) != 0 || !S_ISFIFO(st.st_mode)) {
    return std::unique_ptr<PipeSplicer>();
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return IoError("pipe for the splice path", errno);
  Fd r(fds[0]), w(fds[1]);
  // The scratch holds a tee'd block whole: tee stops at a full pipe, and a block cut short
  // there would be cut at the wrong line end (a shorter block than asked: still correct, but
  // the caller would move fewer bytes than it planned). Rounded up a page for a split line.
  const size_t want = std::max<size_t>(max_block + 4096, 64 << 10);
  const int got = ::fcntl(w.get(), F_SETPIPE_SZ, static_cast<int>(want));
  if (got < 0 || static_cast<size_t>(got) < want) {
    // Not allowed (a user's pipe-max-size below it): copy instead, as before splice.
    return std::unique_ptr<PipeSplicer>();
  }
  Fd null(::open("/dev/null", O_WRONLY | O_CLOEXEC));
  if (null.get() < 0) return IoError("open /dev/null", errno);
  return std::unique_ptr<PipeSplicer>(
      new PipeSplicer(input_fd, std::move(r), std::move(w), std::move(null)));
}

Result<size_t> PipeSplicer::Available() const {
  int n = 0;
  if (::ioctl(in_, FIONREAD, &n) != 0) return IoError("FIONREAD on the input pipe", errno);
  return static_cast<size_t>(std::max(n, 0));
}

Result<size_t> PipeSplicer::LastLineEnd(size_t length) {
  // Duplicate the head of the input (no bytes copied, the pages are shared). One call: tee
  // always starts at the input's head, so a second would duplicate the same bytes again. It may
  // take less than asked (the scratch's slots, when the input's pages are partly filled): the
  // block is then cut within what it took.
  ssize_t k;
  do {
    k = ::tee(in_, scratch_w_.get(), length, SPLICE_F_NONBLOCK);
  } while (k < 0 && errno == EINTR);
  if (k <= 0) return IoError("tee the input pipe", k == 0 ? EIO : errno);
  const size_t teed = static_cast<size_t>(k);
  const size_t tail = std::min(teed, kTailBytes);
  FERRY_RETURN_IF_ERROR(DropScratch(teed - tail));
  char buf[kTailBytes];
  FERRY_RETURN_IF_ERROR(ReadScratch(buf, tail));
  const void* nl = ::memrchr(buf, '\n', tail);
  if (nl == nullptr) return size_t{0};
  return teed - tail + static_cast<size_t>(static_cast<const char*>(nl) - buf) + 1;
}

Result<size_t> PipeSplicer::ReadCut(char* dst, size_t cap, bool* ended) {
  *ended = false;
  FERRY_ASSIGN_OR_RETURN(const size_t available, Available());
  if (available == 0) {
    // Nothing waiting: a plain read tells the end (0) from bytes that arrived just now.
    ssize_t k;
    do {
      k = ::read(in_, dst, cap);
    } while (k < 0 && errno == EINTR);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return size_t{0};
    if (k < 0) return IoError("read the input pipe", errno);
    *ended = k == 0;
    return static_cast<size_t>(k);
  }
  // The bytes come through the scratch (tee, then read: one copy, as a plain read), and as many
  // leave the input as are kept (splice into /dev/null: none copied).
  ssize_t k;
  do {
    k = ::tee(in_, scratch_w_.get(), std::min(available, cap), SPLICE_F_NONBLOCK);
  } while (k < 0 && errno == EINTR);
  if (k <= 0) return IoError("tee the input pipe", k == 0 ? EIO : errno);
  const size_t teed = static_cast<size_t>(k);
  FERRY_RETURN_IF_ERROR(ReadScratch(dst, teed));
  const void* nl = ::memrchr(dst, '\n', teed);
  const size_t keep =
      nl == nullptr ? teed : static_cast<size_t>(static_cast<const char*>(nl) - dst) + 1;
  FERRY_RETURN_IF_ERROR(Discard(keep));
  return keep;
}

Status PipeSplicer::ReadScratch(char* dst, size_t n) {
  return ReadFull(scratch_r_.get(), dst, n, "read the scratch pipe");
}

Status PipeSplicer::ReadExact(char* dst, size_t n) {
  return ReadFull(in_, dst, n, "read the input pipe");
}

Status PipeSplicer::DropScratch(size_t n) {
  return SpliceToNull(scratch_r_.get(), null_.get(), n, "splice the scratch pipe into /dev/null");
}

Status PipeSplicer::Discard(size_t n) {
  return SpliceToNull(in_, null_.get(), n, "splice the input pipe into /dev/null");
}

Result<size_t> PipeSplicer::Move(int sink, size_t n) {
  while (true) {
    const ssize_t k = ::splice(in_, nullptr, sink, nullptr, n, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
    if (k > 0) return static_cast<size_t>(k);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return size_t{0};
    if (k < 0 && errno == EPIPE) return PeerFailure("the sink's reader is gone");
    return IoError("splice the input pipe into a sink", k == 0 ? EIO : errno);
  }
}

Result<size_t> PipeRoom(int fd, size_t capacity) {
  int queued = 0;
  if (::ioctl(fd, FIONREAD, &queued) != 0) return IoError("FIONREAD on a sink pipe", errno);
  const size_t q = static_cast<size_t>(std::max(queued, 0));
  return capacity > q ? capacity - q : 0;
}

}  // namespace ferry::models
