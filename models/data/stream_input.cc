// The dealer's sources (stream_input.h): a pipe, a followed directory, a tailed file.
#include "models/data/stream_input.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

namespace ferry::models {
namespace {

constexpr int kInputPipeBytes = 1 << 20;

Result<size_t> ReadSome(int fd, const std::string& what, char* dst, size_t cap) {
  while (true) {
    const ssize_t n = ::read(fd, dst, cap);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    if (errno != EINTR) return IoError("read " + what, errno);
  }
}

// Takes every pending event of an inotify descriptor (non-blocking): only the wake-up matters.
void DrainInotify(int fd) {
  alignas(inotify_event) char buf[4096];
  while (::read(fd, buf, sizeof buf) > 0) {
  }
}

Result<Fd> WatchPath(const std::string& path, uint32_t events) {
  Fd fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (fd.get() < 0) return IoError("inotify_init1 for " + path, errno);
  if (::inotify_add_watch(fd.get(), path.c_str(), events) < 0) {
    return IoError("watch " + path, errno);
  }
  return fd;
}

class PipeInput final : public StreamInput {
 public:
  PipeInput(Fd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  int poll_fd() const override { return fd_.get(); }
  bool ready() override { return false; }
  Status Woken() override { return Status::Ok(); }
  Result<size_t> Read(char* dst, size_t cap, bool* ended) override {
    // Only called once poll said readable: 0 is the end (every writer closed it).
    FERRY_ASSIGN_OR_RETURN(const size_t n, ReadSome(fd_.get(), InputName(path_), dst, cap));
    *ended = n == 0;
    return n;
  }
  std::string Where() const override { return InputName(path_); }
  int splice_fd() const override { return fd_.get(); }

 private:
  Fd fd_;
  std::string path_;
};

class DirInput final : public StreamInput {
 public:
  DirInput(Fd watch, std::string dir, FollowShare share)
      : watch_(std::move(watch)), dir_(std::move(dir)), share_(share) {}
  int poll_fd() const override { return watch_.get(); }
  bool ready() override { return current_.get() >= 0 || !pending_.empty(); }
  Status Woken() override {
    DrainInotify(watch_.get());
    return Scan();
  }
  Result<size_t> Read(char* dst, size_t cap, bool* ended) override {
    *ended = false;
    while (true) {
      if (current_.get() < 0) {
        if (pending_.empty()) return size_t{0};
        name_ = pending_.front();
        pending_.pop_front();
        current_ = Fd(::open((dir_ + "/" + name_).c_str(), O_RDONLY | O_CLOEXEC));
        last_ = '\n';
        // A file removed between the listing and the open was never complete here: skip it.
        if (current_.get() < 0 && errno == ENOENT) continue;
        if (current_.get() < 0) return IoError("open " + dir_ + "/" + name_, errno);
      }
      FERRY_ASSIGN_OR_RETURN(const size_t n,
                             ReadSome(current_.get(), dir_ + "/" + name_, dst, cap));
      if (n > 0) {
        last_ = dst[n - 1];
        return n;
      }
      current_ = Fd();
      ++files_read_;
      // A file that ends without '\n' must not run its last line into the next file's first.
      if (last_ != '\n') {
        last_ = '\n';
        dst[0] = '\n';
        return size_t{1};
      }
    }
  }
  std::string Where() const override {
    return dir_ + (name_.empty() ? "" : "/" + name_) + " (" + std::to_string(files_read_) + " of " +
           std::to_string(taken_) + " files read)";
  }

  Status Scan() {
    Fd d(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (d.get() < 0) return IoError("open " + dir_, errno);
    DIR* dp = ::fdopendir(d.release());
    if (dp == nullptr) return IoError("fdopendir " + dir_, errno);
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(dp)) {
      const std::string name = e->d_name;
      struct stat st;
      if (name[0] == '.' || ::fstatat(::dirfd(dp), e->d_name, &st, 0) != 0) continue;
      if (S_ISREG(st.st_mode)) names.push_back(name);
    }
    ::closedir(dp);
    std::vector<std::string> fresh = NewFollowedFiles(names, seen_);
    if (share_.count > 1 && !fresh.empty() && !seen_.empty() && fresh.front() < *seen_.rbegin()) {
      // Each share takes every count-th name in name order: a late name that sorts before one
      // already seen would move every later file to another share.
      return InvalidArgument("--follow " + dir_ + ": " + fresh.front() + " appeared after " +
                             *seen_.rbegin() +
                             " and sorts before it; when every worker follows the directory " +
                             "(--consistency bsp) new files must sort after the ones there");
    }
    for (std::string& n : fresh) {
      const uint64_t index = seen_.size();
      seen_.insert(n);
      if (index % share_.count != share_.index) continue;
      ++taken_;
      pending_.push_back(std::move(n));
    }
    return Status::Ok();
  }

 private:
  Fd watch_;
  std::string dir_;
  FollowShare share_;
  std::set<std::string> seen_;
  std::deque<std::string> pending_;
  Fd current_;
  std::string name_;
  char last_ = '\n';  // the last byte read of the current file
  uint64_t files_read_ = 0;
  uint64_t taken_ = 0;  // files of this share listed so far
};

class TailInput final : public StreamInput {
 public:
  TailInput(Fd watch, Fd file, std::string path, FollowShare share)
      : watch_(std::move(watch)), file_(std::move(file)), path_(std::move(path)), share_(share) {}
  int poll_fd() const override { return watch_.get(); }
  bool ready() override {
    if (kept_.size() > given_) return true;
    struct stat st;
    return ::fstat(file_.get(), &st) == 0 && static_cast<uint64_t>(st.st_size) != offset_;
  }
  Status Woken() override {
    DrainInotify(watch_.get());
    return Status::Ok();
  }
  Result<size_t> Read(char* dst, size_t cap, bool* ended) override {
    *ended = false;
    struct stat st;
    if (::fstat(file_.get(), &st) != 0) return IoError("stat " + path_, errno);
    if (static_cast<uint64_t>(st.st_size) < offset_) {
      return InvalidArgument(path_ + " shrank from " + std::to_string(offset_) + " to " +
                             std::to_string(st.st_size) +
                             " bytes (truncated or rotated): --follow FILE tails one growing file");
    }
    if (share_.count <= 1) {
      FERRY_ASSIGN_OR_RETURN(const size_t n, ReadSome(file_.get(), path_, dst, cap));
      offset_ += n;
      return n;
    }
    // A share: the file's bytes go through raw_, this share's whole lines into kept_.
    while (kept_.size() == given_) {
      kept_.clear();
      given_ = 0;
      const size_t had = raw_.size();
      raw_.resize(had + kShareReadBytes);
      Result<size_t> n = ReadSome(file_.get(), path_, raw_.data() + had, kShareReadBytes);
      raw_.resize(had + (n.ok() ? *n : 0));
      FERRY_RETURN_IF_ERROR(n.status());
      if (*n == 0) return size_t{0};
      offset_ += *n;
      raw_.erase(0, KeepSharedLines(raw_, share_, &line_, &kept_));
    }
    const size_t n = std::min(cap, kept_.size() - given_);
    std::memcpy(dst, kept_.data() + given_, n);
    given_ += n;
    return n;
  }
  std::string Where() const override {
    return path_ + " at byte " + std::to_string(offset_) +
           (share_.count > 1 ? " (line " + std::to_string(line_) + ")" : "");
  }

 private:
  static constexpr size_t kShareReadBytes = 1 << 20;
  Fd watch_;
  Fd file_;
  std::string path_;
  FollowShare share_;
  uint64_t offset_ = 0;
  // A share's state: bytes read that do not end a line yet, the share's lines of what was read
  // and how many of their bytes Read gave, the file's whole lines so far.
  std::string raw_, kept_;
  size_t given_ = 0;
  uint64_t line_ = 0;
};

Result<std::unique_ptr<StreamInput>> OpenPipe(const std::string& path) {
  // Not waiting for a FIFO's writer: the dealer could not stop meanwhile, and it reads only
  // after poll says there is something (or the writers are gone).
  FERRY_ASSIGN_OR_RETURN(Fd fd, OpenStreamFd(path, /*without_waiting=*/true));
  // A pipe of 1 MiB instead of the default 64 KiB: the writer (cat, a generator) and the dealer
  // wake each other 16 times less often. Not a pipe (a socket, a terminal) or not allowed
  // (fs.pipe-max-size, a pipe of another user): the size stays, which only costs wake-ups.
  (void)::fcntl(fd.get(), F_SETPIPE_SZ, kInputPipeBytes);
  return std::unique_ptr<StreamInput>(new PipeInput(std::move(fd), path));
}

}  // namespace

size_t KeepSharedLines(std::string_view data, FollowShare share, uint64_t* line, std::string* out) {
  size_t pos = 0;
  while (pos < data.size()) {
    const void* nl = std::memchr(data.data() + pos, '\n', data.size() - pos);
    if (nl == nullptr) break;
    const size_t end = static_cast<size_t>(static_cast<const char*>(nl) - data.data()) + 1;
    if ((*line / share.block_lines) % share.count == share.index) {
      out->append(data.data() + pos, end - pos);
    }
    ++*line;
    pos = end;
  }
  return pos;
}

std::vector<std::string> NewFollowedFiles(const std::vector<std::string>& listing,
                                          const std::set<std::string>& seen) {
  std::vector<std::string> out;
  for (const std::string& n : listing) {
    if (!n.empty() && n[0] != '.' && seen.count(n) == 0) out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Result<std::unique_ptr<StreamInput>> OpenStreamInput(const std::string& path, FollowMode mode,
                                                     FollowShare share) {
  struct stat st;
  switch (mode) {
    case FollowMode::kNone:
      return OpenPipe(path);
    case FollowMode::kDir: {
      if (::stat(path.c_str(), &st) != 0) return IoError("--follow " + path, errno);
      if (!S_ISDIR(st.st_mode)) return InvalidArgument("--follow " + path + " is not a directory");
      // Renames into the directory and files closed after writing in it wake the dealer.
      FERRY_ASSIGN_OR_RETURN(Fd watch, WatchPath(path, IN_MOVED_TO | IN_CLOSE_WRITE | IN_CREATE));
      if (share.count == 0 || share.index >= share.count) {
        return InvalidArgument("--follow " + path + ": share " + std::to_string(share.index) +
                               " of " + std::to_string(share.count));
      }
      auto in = std::make_unique<DirInput>(std::move(watch), path, share);
      FERRY_RETURN_IF_ERROR(in->Scan());
      return std::unique_ptr<StreamInput>(std::move(in));
    }
    case FollowMode::kTail: {
      Fd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      if (file.get() < 0) return IoError("open " + path, errno);
      if (::fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        return InvalidArgument("--follow " + path + " is neither a directory nor a regular file");
      }
      if (share.count == 0 || share.index >= share.count || share.block_lines == 0) {
        return InvalidArgument("--follow " + path + ": share " + std::to_string(share.index) +
                               " of " + std::to_string(share.count) + " in blocks of " +
                               std::to_string(share.block_lines) + " lines");
      }
      FERRY_ASSIGN_OR_RETURN(Fd watch, WatchPath(path, IN_MODIFY));
      return std::unique_ptr<StreamInput>(
          new TailInput(std::move(watch), std::move(file), path, share));
    }
  }
  return InvalidArgument("unknown follow mode");
}

}  // namespace ferry::models
