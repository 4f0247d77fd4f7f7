// Input files as byte streams: plain files read with pread from an offset, gzip files inflated
// with zlib (several concatenated gzip members are one stream, as gzip -d sees them), and
// streams: standard input ("-") or a named pipe, read front to back once, plain text only.
//
// Internal to models/data (the Reader and its tests). Errors name the file.
// Thread-safety: a stream is used by one thread at a time; distinct streams are independent.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "transport/status.h"

namespace ferry::models {

// What the reader needs to know about an input before planning shards.
struct InputFile {
  std::string path;
  uint64_t size = 0;  // bytes on disk (compressed size for gzip)
  bool gzip = false;  // starts with the gzip magic 1f 8b; never decided by the file name
  // "-" (standard input) or a FIFO, socket or character device: no size (0), read once, front
  // to back, by one shard; gzip is not sniffed (a stream's first bytes cannot be put back) but
  // refused when its first bytes are the magic.
  bool stream = false;
};

// Whether `path` names a stream: "-", or a FIFO, socket or character device (stat, which does
// not open it: opening a FIFO blocks until a writer comes). False for anything stat fails on.
bool IsStreamInput(const std::string& path);
// How messages name an input: "stdin" for "-", else the path.
std::string InputName(const std::string& path);

// Opens `path`, checks that it is a regular file (sharding needs its size) and sniffs the gzip
// magic; a stream (IsStreamInput) is described without being opened. Errors: IoError
// "open PATH: ...", InvalidArgument "PATH is not a regular file" (a directory, say).
Result<InputFile> ProbeInput(const std::string& path);

// Owns a file descriptor (closed on destruction). Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// Uncompressed bytes of one input, front to back.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Reads up to `cap` (> 0) bytes; 0 means end of input. Errors name the file.
  virtual Result<size_t> Read(char* dst, size_t cap) = 0;
};

// A descriptor of a stream input (IsStreamInput): a duplicate of descriptor 0 for "-" and of N
// for "/dev/fd/N" (a descriptor this process holds, as bash's <(cmd) gives: opened again, a pipe
// whose writer has closed would wait for a new one instead of giving its bytes and its end),
// else `path` opened for reading. A FIFO's open waits for a writer unless `without_waiting`, which
// opens it non-blocking and then makes it blocking again (for a reader that polls first: a read
// of a FIFO no writer has opened yet returns 0). Errors name the path.
Result<Fd> OpenStreamFd(const std::string& path, bool without_waiting);

// A plain file from byte `offset` on, or a whole gzip file or stream (offset must then be 0).
// A stream's Read blocks until bytes come or every writer has closed it; "-" reads a duplicate
// of descriptor 0, so standard input stays open for whoever reads it next.
Result<std::unique_ptr<ByteStream>> OpenStream(const InputFile& input, uint64_t offset);

// 1-based number of the first line that starts at or after byte `begin` of a plain file (the
// first line a shard starting at `begin` reads): 1 for begin 0, else 2 + the number of '\n' in
// bytes [0, begin - 1). Reads the prefix, so callers compute it only when they need it (to
// report a malformed line).
Result<uint64_t> FirstLineNumber(const std::string& path, uint64_t begin);

}  // namespace ferry::models
