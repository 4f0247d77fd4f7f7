#include "models/data/input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::models {
namespace {

constexpr size_t kGzipInputBytes = 64 << 10;  // compressed bytes read per refill

Result<Fd> OpenFile(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return IoError("open " + path, errno);
  return Fd(fd);
}

Result<size_t> PRead(int fd, const std::string& path, char* dst, size_t cap, uint64_t offset) {
  while (true) {
    const ssize_t n = ::pread(fd, dst, cap, static_cast<off_t>(offset));
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) return IoError("read " + path, errno);
  }
}

class PlainStream final : public ByteStream {
 public:
  PlainStream(Fd fd, std::string path, uint64_t offset)
      : fd_(std::move(fd)), path_(std::move(path)), offset_(offset) {}

  Result<size_t> Read(char* dst, size_t cap) override {
    FERRY_ASSIGN_OR_RETURN(const size_t n, PRead(fd_.get(), path_, dst, cap, offset_));
    offset_ += n;
    return n;
  }

 private:
  Fd fd_;
  std::string path_;
  uint64_t offset_;
};

// A pipe, FIFO or terminal: read(2), no offsets. The first bytes are checked for the gzip magic,
// which the reader would otherwise parse as garbage lines.
class PipeStream final : public ByteStream {
 public:
  PipeStream(Fd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}

  Result<size_t> Read(char* dst, size_t cap) override {
    while (true) {
      const ssize_t n = ::read(fd_.get(), dst, cap);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return IoError("read " + InputName(path_), errno);
      const size_t got = static_cast<size_t>(n);
      for (size_t i = 0; i < got && seen_ < 2; ++i) magic_[seen_++] = static_cast<uint8_t>(dst[i]);
      if (seen_ == 2 && magic_[0] == 0x1f && magic_[1] == 0x8b && !checked_) {
        return InvalidArgument(InputName(path_) +
                               " holds gzip data: a stream is read as plain text (decompress "
                               "it on the way in: zcat FILE.gz | ferry-train --train - ...)");
      }
      if (seen_ == 2) checked_ = true;
      return got;
    }
  }

 private:
  Fd fd_;
  std::string path_;
  uint8_t magic_[2] = {0, 0};
  size_t seen_ = 0;
  bool checked_ = false;
};

// zlib inflate over a file. z_stream points into in_, so the object is never moved once
// initialised (it lives behind a unique_ptr).
class GzipStream final : public ByteStream {
 public:
  GzipStream(Fd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  ~GzipStream() override {
    if (initialised_) inflateEnd(&zs_);
  }
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;

  Status Init() {
    in_.resize(kGzipInputBytes);
    std::memset(&zs_, 0, sizeof zs_);
    // 15 + 16: a gzip wrapper (not zlib, not raw deflate) with the largest window.
    const int rc = inflateInit2(&zs_, 15 + 16);
    if (rc != Z_OK) return ResourceExhausted("inflateInit2 for " + path_ + " failed");
    initialised_ = true;
    return Status::Ok();
  }

  Result<size_t> Read(char* dst, size_t cap) override {
    if (done_) return size_t{0};
    zs_.next_out = reinterpret_cast<Bytef*>(dst);
    zs_.avail_out = static_cast<uInt>(std::min<size_t>(cap, UINT32_MAX));
    const uInt want = zs_.avail_out;
    while (zs_.avail_out == want) {
      if (zs_.avail_in == 0 && !in_eof_) FERRY_RETURN_IF_ERROR(Refill());
      if (member_done_) {
        // Another gzip member may follow (gzip -c a >f; gzip -c b >>f): inflate it too.
        if (zs_.avail_in == 0) {
          done_ = true;
          break;
        }
        if (inflateReset(&zs_) != Z_OK) return Internal("inflateReset failed for " + path_);
        member_done_ = false;
      }
      if (zs_.avail_in == 0) {
        return InvalidArgument(path_ + ": gzip data ends early (truncated file?) after " +
                               std::to_string(zs_.total_out) + " bytes of the current member");
      }
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        member_done_ = true;
      } else if (rc == Z_MEM_ERROR) {
        return ResourceExhausted(path_ + ": out of memory while inflating gzip data");
      } else if (rc != Z_OK) {
        return InvalidArgument(path_ + ": corrupt gzip data (" +
                               std::string(zs_.msg ? zs_.msg : "no progress") + ")");
      }
    }
    return static_cast<size_t>(want - zs_.avail_out);
  }

 private:
  Status Refill() {
    FERRY_ASSIGN_OR_RETURN(const size_t n, PRead(fd_.get(), path_, in_.data(), in_.size(), pos_));
    pos_ += n;
    if (n == 0) in_eof_ = true;
    zs_.next_in = reinterpret_cast<Bytef*>(in_.data());
    zs_.avail_in = static_cast<uInt>(n);
    return Status::Ok();
  }

  Fd fd_;
  std::string path_;
  std::vector<char> in_;
  z_stream zs_;
  uint64_t pos_ = 0;
  bool initialised_ = false;
  bool in_eof_ = false;
  bool member_done_ = false;
  bool done_ = false;
};

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

bool IsStreamInput(const std::string& path) {
  if (path == "-") return true;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  return S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISCHR(st.st_mode);
}

std::string InputName(const std::string& path) {
  return path == "-" ? "stdin" : path;
}

Result<InputFile> ProbeInput(const std::string& path) {
  if (IsStreamInput(path)) {
    InputFile input;
    input.path = path;
    input.stream = true;
    return input;
  }
  FERRY_ASSIGN_OR_RETURN(Fd fd, OpenFile(path));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return IoError("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgument(path +
                           " is not a regular file, nor a stream (a pipe, a FIFO, or '-' for "
                           "stdin)");
  }
  InputFile input;
  input.path = path;
  input.size = static_cast<uint64_t>(st.st_size);
  unsigned char magic[2] = {0, 0};
  FERRY_ASSIGN_OR_RETURN(const size_t n,
                         PRead(fd.get(), path, reinterpret_cast<char*>(magic), 2, 0));
  input.gzip = n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  return input;
}

Result<Fd> OpenStreamFd(const std::string& path, bool without_waiting) {
  constexpr std::string_view kFdPrefix = "/dev/fd/";
  const bool numbered = path.size() > kFdPrefix.size() && path.rfind(kFdPrefix, 0) == 0 &&
                        path.size() - kFdPrefix.size() <= 9 &&
                        std::all_of(path.begin() + kFdPrefix.size(), path.end(),
                                    [](char c) { return c >= '0' && c <= '9'; });
  if (path == "-" || numbered) {
    const int held = numbered ? std::stoi(path.substr(kFdPrefix.size())) : 0;
    Fd fd(::fcntl(held, F_DUPFD_CLOEXEC, 3));
    if (fd.get() < 0) return IoError("duplicate " + InputName(path), errno);
    return fd;
  }
  if (!without_waiting) return OpenFile(path);
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) return IoError("open " + path, errno);
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) < 0) {
    return IoError("fcntl " + path, errno);
  }
  return fd;
}

Result<std::unique_ptr<ByteStream>> OpenStream(const InputFile& input, uint64_t offset) {
  if (input.stream) {
    if (offset != 0) return Internal("a stream cannot start at an offset: " + input.path);
    FERRY_ASSIGN_OR_RETURN(Fd fd, OpenStreamFd(input.path, /*without_waiting=*/false));
    return std::unique_ptr<ByteStream>(new PipeStream(std::move(fd), input.path));
  }
  FERRY_ASSIGN_OR_RETURN(Fd fd, OpenFile(input.path));
  if (!input.gzip) {
    return std::unique_ptr<ByteStream>(new PlainStream(std::move(fd), input.path, offset));
  }
  if (offset != 0) return Internal("a gzip stream cannot start at an offset: " + input.path);
  auto gz = std::make_unique<GzipStream>(std::move(fd), input.path);
  FERRY_RETURN_IF_ERROR(gz->Init());
  return std::unique_ptr<ByteStream>(std::move(gz));
}

Result<uint64_t> FirstLineNumber(const std::string& path, uint64_t begin) {
  if (begin == 0) return uint64_t{1};
  FERRY_ASSIGN_OR_RETURN(Fd fd, OpenFile(path));
  std::vector<char> buf(256 << 10);
  uint64_t newlines = 0;
  uint64_t pos = 0;
  while (pos < begin - 1) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), begin - 1 - pos));
    FERRY_ASSIGN_OR_RETURN(const size_t n, PRead(fd.get(), path, buf.data(), want, pos));
    if (n == 0) break;
    newlines += static_cast<uint64_t>(std::count(buf.data(), buf.data() + n, '\n'));
    pos += n;
  }
  return newlines + 2;
}

}  // namespace ferry::models
