// The dealing loop (stream_dealer.h): one poll over the input, the sinks with bytes waiting and
// the stop event.
#include "models/data/stream_dealer.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>

#include "models/data/stream_splice.h"

namespace ferry::models {
namespace {

using Clock = std::chrono::steady_clock;

// The splice path (stream_splice.h). A sink gets a spliced block, a whole one, when its pipe has
// room for it and a slack; a sink with less room that is not full is looked at again after
// kRoomRetryMs (its POLLOUT would wake the dealer at every page the worker frees). A pipe holds
// page slots, not bytes: a block cut inside pages takes a slot for each of its partial first and
// last pages, so a pipe of many blocks holds fewer bytes than its capacity. Whole blocks (at most
// a quarter of the pipe, so one always fits) keep those pages few; the slack covers them:
// kSpliceSlack and a 32nd of the pipe. A block planned by bytes that still does not fit waits for
// POLLOUT, which counts slots.
constexpr size_t kSpliceSlack = 16 << 10;
constexpr int kRoomRetryMs = 1;

// A worker's pipe and the block being written to it. The block's bytes are not copied: they
// stay in the dealer's read buffer (`data` points there) until written, unless the buffer must
// be compacted first (Keep) or the block is the input's last line given its '\n' (`own`).
struct Sink {
  Fd fd;
  size_t capacity = 0;  // of its pipe (F_GETPIPE_SZ), for the splice path
  const char* data = nullptr;
  size_t size = 0;  // 0: nothing to write
  size_t done = 0;  // bytes of it written
  std::string own;
  bool dead = false;
  bool socket = false;   // its reader may ask for no more blocks (DealerOptions::open)
  bool leaving = false;  // it asked: closed once its block is written
  bool Free() const { return !dead && !leaving && size == 0 && fd.get() >= 0; }
  // Its reader is gone (its worker died; the launcher stops the job): what it was owed is lost.
  void Drop(uint64_t unwritten, DealerStats* stats) {
    dead = true;
    fd = Fd();
    stats->lost_bytes += unwritten;
  }
  bool InBuffer() const { return size > 0 && data != own.data(); }
  // Copies what is left of the block out of the read buffer, which is about to move.
  void Keep() {
    own.assign(data + done, size - done);
    data = own.data();
    size = own.size();
    done = 0;
  }
};

// Writes what the sink takes without blocking. EPIPE (its reader is gone): the sink is dead.
void Flush(Sink& s, DealerStats* stats) {
  while (!s.dead && s.done < s.size) {
    const ssize_t n = ::write(s.fd.get(), s.data + s.done, s.size - s.done);
    if (n > 0) {
      s.done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      s.Drop(s.size - s.done, stats);
    }
  }
  s.data = nullptr;
  s.size = s.done = 0;
  s.own.clear();
}

// What the splice path waits for when it moved what it could.
struct SpliceState {
  enum class Wait {
    kInput,  // the input pipe is empty
    kRoom,   // no free sink has room for a block: `full` those with none, `retry` any other
    kCopy,   // the next block's tail holds no line end: the copying path reads it (ReadCut)
  } wait = Wait::kInput;
  std::vector<size_t> full;
  bool retry = false;
};

// Moves blocks from the input pipe into free sinks with room, round-robin from *next, while the
// input holds whole lines; leaves in `st` what it waits for. The dealer's read buffer is empty
// (its bytes would come first).
//
// A pipe's room is counted in bytes, but a pipe holds a number of pages, and a spliced block
// cut inside pages takes a page slot per piece: a block may not fit where its bytes would. Its
// rest is then read into the sink's own block (one copy, written when the sink drains), as the
// copying path does with every block, so no other sink waits for this one.
Status SpliceSome(PipeSplicer& sp, std::vector<Sink>& sinks, size_t block, size_t* next,
                  SpliceState* st, DealerStats* stats) {
  st->wait = SpliceState::Wait::kInput;
  // Sinks that took no page of a block planned by their bytes of room: full by their slots.
  std::vector<bool> no_slots(sinks.size(), false);
  while (true) {
    FERRY_ASSIGN_OR_RETURN(const size_t available, sp.Available());
    if (available == 0) return Status::Ok();
    size_t pick = sinks.size(), length = 0;
    st->full.clear();
    st->retry = false;
    for (size_t k = 0; k < sinks.size(); ++k) {
      const size_t i = (*next + k) % sinks.size();
      if (!sinks[i].Free()) continue;
      if (no_slots[i]) {
        st->full.push_back(i);  // POLLOUT counts slots: it says when the pages fit
        continue;
      }
      const size_t cap = sinks[i].capacity;
      const size_t whole = std::min(block, cap / 4);
      FERRY_ASSIGN_OR_RETURN(const size_t room, PipeRoom(sinks[i].fd.get(), cap));
      length = SpliceBlockLength(available, room, whole, kSpliceSlack + cap / 32, whole);
      if (length > 0) {
        pick = i;
        break;
      }
      if (room == 0) {
        st->full.push_back(i);
      } else {
        st->retry = true;
      }
    }
    if (pick == sinks.size()) {
      // Every free sink is (nearly) full, or none is free (each writes a block of its own:
      // the poll waits for those).
      st->wait = SpliceState::Wait::kRoom;
      return Status::Ok();
    }
    FERRY_ASSIGN_OR_RETURN(const size_t end, sp.LastLineEnd(length));
    if (end == 0) {
      st->wait = SpliceState::Wait::kCopy;
      return Status::Ok();
    }
    Sink& s = sinks[pick];
    size_t done = 0;
    while (done < end) {
      Result<size_t> moved = sp.Move(s.fd.get(), end - done);
      if (!moved.ok() && moved.status().code() == Code::kPeerFailure) {
        s.Drop(end - done, stats);
        FERRY_RETURN_IF_ERROR(sp.Discard(end - done));
        done = end;
        break;
      }
      FERRY_RETURN_IF_ERROR(moved.status());
      if (*moved == 0) break;
      done += *moved;
      stats->spliced_bytes += *moved;
    }
    if (done == 0) {
      no_slots[pick] = true;  // nothing moved: the block waits for another sink or for slots
      continue;
    }
    *next = (pick + 1) % sinks.size();
    stats->bytes += end;
    if (done < end) {
      s.own.resize(end - done);
      FERRY_RETURN_IF_ERROR(sp.ReadExact(s.own.data(), s.own.size()));
      s.data = s.own.data();
      s.size = s.own.size();
      s.done = 0;
      Flush(s, stats);
    }
  }
}

Status MakeNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return IoError("fcntl on a dealer sink", errno);
  }
  return Status::Ok();
}

// A socket sink's reader may ask to go (DealerOptions::open); a pipe's cannot.
bool IsSocket(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

// A socket sink's reader spoke (DealerOptions::open): its end of writing, or bytes (read and
// dropped, so closing the socket later sends no reset that would cut what it still reads), mean
// it goes. Nothing to read yet: it stays.
void ReadLeaveWord(Sink& s) {
  char buf[64];
  const ssize_t n = ::recv(s.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
  if (n >= 0) s.leaving = true;
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) s.leaving = true;
}

}  // namespace

Status StopDealingTo(int fd) {
  if (::shutdown(fd, SHUT_WR) == 0) return Status::Ok();
  if (errno == ENOTSOCK) {
    return InvalidArgument(
        "this share of the stream comes through a pipe, which cannot tell its dealer to stop");
  }
  return IoError("tell the stream dealer to stop dealing to this reader", errno);
}

size_t NextBlockEnd(std::string_view data, size_t max_bytes, uint64_t lines_left, uint64_t* lines) {
  *lines = 0;
  size_t end = 0;
  const char* p = data.data();
  while (*lines < lines_left) {
    const void* nl = std::memchr(p + end, '\n', data.size() - end);
    if (nl == nullptr) break;
    const size_t line_end = static_cast<size_t>(static_cast<const char*>(nl) - p) + 1;
    if (line_end > max_bytes && *lines > 0) break;
    end = line_end;
    ++*lines;
    if (end >= max_bytes) break;
  }
  return end;
}

StreamDealer::StreamDealer(DealerOptions options) : o_(std::move(options)) {}

Result<std::unique_ptr<StreamDealer>> StreamDealer::Start(DealerOptions options) {
  if (options.sinks.empty()) return InvalidArgument("StreamDealer needs at least one sink");
  if (options.block_bytes == 0 || options.read_bytes < options.block_bytes) {
    return InvalidArgument("StreamDealer: block_bytes must be 1..read_bytes");
  }
  std::unique_ptr<StreamDealer> d(new StreamDealer(std::move(options)));
  for (int fd : d->o_.sinks) FERRY_RETURN_IF_ERROR(MakeNonBlocking(fd));
  d->stop_fd_ = Fd(d->o_.stop_fd);
  d->wake_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (d->wake_.get() < 0) return IoError("eventfd", errno);
  d->stats_.lines_per_sink.assign(d->o_.sinks.size(), 0);
  StreamDealer* self = d.get();
  d->thread_ = std::thread([self] {
    // A write to a pipe whose reader is gone must fail with EPIPE, not kill the process.
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    self->result_ = self->Run();
    self->ended_->store(true);
    std::lock_guard<std::mutex> lock(self->add_mu_);
    self->finished_ = true;
    self->added_.clear();  // closed: their readers see an empty share
  });
  return d;
}

StreamDealer::~StreamDealer() {
  if (!joined_ && thread_.joinable()) {
    Stop();
    (void)Join();
  }
}

void StreamDealer::Stop() {
  stop_.store(true);
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

void StreamDealer::AddSink(Fd sink) {
  std::lock_guard<std::mutex> lock(add_mu_);
  if (finished_ || !o_.open) return;  // `sink` closes here: an empty share
  added_.push_back(std::move(sink));
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

Status StreamDealer::Join() {
  if (thread_.joinable()) thread_.join();
  joined_ = true;
  return result_;
}

Status StreamDealer::Run() {
  std::vector<Sink> sinks(o_.sinks.size());
  for (size_t i = 0; i < sinks.size(); ++i) {
    sinks[i].fd = Fd(o_.sinks[i]);
    sinks[i].socket = o_.open && IsSocket(o_.sinks[i]);
  }
  // AddSink's sinks, taken at the top of every round.
  const auto take_added = [&] {
    std::vector<Fd> added;
    {
      std::lock_guard<std::mutex> lock(add_mu_);
      added.swap(added_);
    }
    for (Fd& fd : added) {
      Sink s;
      if (!MakeNonBlocking(fd.get()).ok()) continue;  // closed: an empty share
      s.socket = IsSocket(fd.get());
      s.fd = std::move(fd);
      sinks.push_back(std::move(s));
      stats_.lines_per_sink.push_back(0);
      ++stats_.sinks_added;
    }
  };
  Result<std::unique_ptr<StreamInput>> opened = OpenStreamInput(o_.input, o_.follow, o_.share);
  if (!opened.ok()) return opened.status();
  StreamInput& in = **opened;
  std::unique_ptr<PipeSplicer> splicer;
  if (o_.splice && !o_.open && o_.max_lines == 0 && o_.block_bytes >= kMinSpliceBlock) {
    // --max-samples counts lines, which splicing does not see.
    Result<std::unique_ptr<PipeSplicer>> sp = PipeSplicer::Open(in.splice_fd(), o_.block_bytes);
    if (!sp.ok()) return sp.status();
    splicer = std::move(*sp);
    for (Sink& s : sinks) {
      const int cap = splicer ? ::fcntl(s.fd.get(), F_GETPIPE_SZ) : -1;
      // A sink that is no pipe (a socket), or a small pipe (kMinSplicePipe): copy.
      if (cap < static_cast<int>(kMinSplicePipe)) splicer.reset();
      s.capacity = static_cast<size_t>(std::max(cap, 0));
    }
  }
  SpliceState sp;
  std::vector<char> buf(o_.read_bytes);
  size_t head = 0, tail = 0;
  bool reading = true;
  bool at_eof = false;  // the input ended (not stopped): its last line may lack its '\n'
  uint64_t lines_left = o_.max_lines > 0 ? o_.max_lines : UINT64_MAX;
  size_t next = 0;
  int sticky = -1;  // the sink that gets the rest of a line longer than the buffer
  Clock::time_point last_input = Clock::now();
  const auto end_input = [&](const char* why) {
    if (reading) stats_.end = why;
    reading = false;
    ended_->store(true);
  };
  Status failed;
  while (true) {
    if (stop_.load()) end_input("stopped");
    if (o_.open) {
      take_added();
      for (size_t i = 0; i < sinks.size(); ++i) {
        // A leaving sink whose last block is written (and no line cut open): its reader sees
        // the end of its share.
        Sink& s = sinks[i];
        if (s.leaving && s.size == 0 && s.fd.get() >= 0 && sticky != static_cast<int>(i)) {
          s.fd = Fd();
          ++stats_.sinks_left;
        }
      }
    }
    bool starved = false;
    // Deal every block a free sink can take.
    while (head < tail) {
      size_t pick = sinks.size();
      if (sticky >= 0) {
        // The rest of its line, even to a sink that asked to go.
        const Sink& st = sinks[static_cast<size_t>(sticky)];
        if (st.dead || (st.size == 0 && st.fd.get() >= 0)) pick = static_cast<size_t>(sticky);
      } else {
        for (size_t k = 0; k < sinks.size(); ++k) {
          const size_t i = (next + k) % sinks.size();
          if (sinks[i].Free()) {
            pick = i;
            break;
          }
        }
      }
      if (pick == sinks.size()) break;
      const std::string_view data(buf.data() + head, tail - head);
      uint64_t lines = 0;
      size_t end = NextBlockEnd(data, o_.block_bytes, lines_left, &lines);
      bool add_newline = false;
      if (end == 0) {
        if (!reading && !at_eof && sticky < 0) {
          // Stopped (or idle) inside a line: what came of it is no line, and is not dealt (a
          // worker would take it for a malformed one).
          stats_.unfinished_bytes += data.size();
          head = tail;
          break;
        }
        if (!reading) {
          end = data.size();  // the last line, without its '\n'
          add_newline = true;
          lines = 1;
        } else if (head == 0 && tail == buf.size()) {
          end = data.size();  // a line longer than the buffer: this part now, the rest after
        } else {
          starved = tail == buf.size();  // no whole line in a full buffer: room is needed
          break;
        }
      }
      Sink& s = sinks[pick];
      const bool line_open = !add_newline && data[end - 1] != '\n';
      sticky = line_open ? static_cast<int>(pick) : -1;
      if (!s.dead) {
        if (add_newline) {
          s.own.assign(data.data(), end);
          s.own.push_back('\n');
          s.data = s.own.data();
          s.size = s.own.size();
        } else {
          s.data = data.data();
          s.size = end;
        }
        stats_.lines_per_sink[pick] += lines;
      } else {
        stats_.lost_bytes += end;
      }
      stats_.bytes += end + (add_newline ? 1 : 0);
      stats_.lines += lines;
      head += end;
      Flush(s, &stats_);
      next = (pick + 1) % sinks.size();
      if (lines_left != UINT64_MAX) {
        lines_left -= lines;
        if (lines_left == 0) {
          end_input("--max-samples");
          head = tail;  // what was read past the last line is not dealt
        }
      }
    }
    // The splice path, once the read buffer is empty (its bytes come first) and no line is cut
    // open.
    const bool splicing = splicer && reading && head == tail && sticky < 0;
    if (splicing) {
      const uint64_t before = stats_.bytes;
      Status s = SpliceSome(*splicer, sinks, o_.block_bytes, &next, &sp, &stats_);
      if (!s.ok()) {
        failed = s;
        end_input("input error");
      }
      // Input waiting for the workers is not idle input.
      if (stats_.bytes != before || sp.wait != SpliceState::Wait::kInput) {
        last_input = Clock::now();
      }
    }
    const bool room_wait = splicing && reading && sp.wait == SpliceState::Wait::kRoom;
    bool in_buffer = false;
    for (const Sink& s : sinks) in_buffer |= s.InBuffer();
    if (head == tail && !in_buffer) head = tail = 0;
    if (head > 0 && tail == buf.size() && (head >= buf.size() / 2 || starved)) {
      // The buffer is full and half of it dealt (or it holds no whole line): the rest moves to
      // its front. Not sooner: when the workers are slower than the input, the buffer stays
      // full and each block dealt frees only a block, so moving the rest every time copied the
      // buffer over again per block (0.9% of a 2-core job's CPU); this way each byte moves at
      // most once. What is being written moves out of the buffer first (a copy, rarely: at most
      // a block per sink), so a worker waiting for input is never held up by another's full pipe.
      for (Sink& s : sinks) {
        if (s.InBuffer()) s.Keep();
      }
      std::memmove(buf.data(), buf.data() + head, tail - head);
      tail -= head;
      head = 0;
    }
    bool pending = false, alive = false;
    for (const Sink& s : sinks) {
      pending |= !s.dead && s.size > 0;
      alive |= !s.dead && (!s.leaving || s.size > 0);
    }
    if (!alive) {
      // Every worker is gone: nothing reads the stream any more (the launcher ends the job).
      stats_.lost_bytes += tail - head;
      end_input("every reader gone");
      break;
    }
    if (!reading && head == tail) {
      // Nothing more to deal: a sink whose last block is written is closed now, not when every
      // other one is. Its worker sees the end of its share and goes on to the collectives the
      // others may already wait in; a worker that has not taken its last block yet may be one
      // of them (waiting for this one), and would never take it.
      for (Sink& s : sinks) {
        if (!s.dead && s.size == 0) s.fd = Fd();
      }
      if (!pending) break;
    }
    if (!reading && head < tail && !pending && sticky < 0) continue;  // deal the rest

    std::vector<pollfd> fds;
    fds.push_back({wake_.get(), POLLIN, 0});
    // Index 1 when there is one; polled only while reading (it ends the input, nothing else).
    const bool stop_fd = reading && stop_fd_.get() >= 0;
    if (stop_fd) fds.push_back({stop_fd_.get(), POLLIN, 0});
    // Splicing waits for a sink with room before it looks at the input again. And the buffer
    // takes only what splicing could not cut: while it holds whole lines, nothing more is read
    // into it (that would keep it from ever emptying, and every byte after would be copied);
    // once they are dealt it is empty and splicing goes on. It reads on only to finish a line.
    const bool buffered_lines = splicer && head < tail && buf[tail - 1] == '\n';
    const bool want_input = reading && tail < buf.size() && !room_wait && !buffered_lines;
    const bool input_fd = want_input && in.poll_fd() >= 0;
    if (input_fd) fds.push_back({in.poll_fd(), POLLIN, 0});
    const bool ready = want_input && in.ready();
    std::vector<size_t> who;
    for (size_t i = 0; i < sinks.size(); ++i) {
      const Sink& s = sinks[i];
      const bool splice_room =
          room_wait && std::find(sp.full.begin(), sp.full.end(), i) != sp.full.end();
      const short events = static_cast<short>((s.size > 0 || splice_room ? POLLOUT : 0) |
                                              (s.socket && !s.leaving ? POLLIN : 0));
      if (s.dead || s.fd.get() < 0 || events == 0) continue;
      fds.push_back({s.fd.get(), events, 0});
      who.push_back(i);
    }
    int timeout = ready ? 0 : -1;
    if (!ready && reading && o_.idle_exit_seconds > 0) {
      const double left =
          o_.idle_exit_seconds - std::chrono::duration<double>(Clock::now() - last_input).count();
      if (left <= 0) {
        end_input("idle");
        continue;
      }
      timeout = static_cast<int>(std::ceil(left * 1000));
    }
    if (!ready && room_wait && sp.retry) {
      timeout = timeout < 0 ? kRoomRetryMs : std::min(timeout, kRoomRetryMs);
    }
    const int rc = ::poll(fds.data(), fds.size(), timeout);
    if (rc < 0 && errno != EINTR) {
      failed = IoError("poll in the stream dealer", errno);
      break;
    }
    if (rc < 0) continue;
    if (fds[0].revents != 0) {
      // Stop(): taken once (stop_ stays set); left unread, it would wake every later poll.
      uint64_t count = 0;
      (void)!::read(wake_.get(), &count, sizeof count);
    }
    size_t k = 1;
    if (stop_fd) {
      if (fds[k].revents != 0) end_input("stopped");
      ++k;
    }
    bool readable = ready;
    if (input_fd) {
      if (fds[k].revents != 0) {
        readable = true;
        if (Status s = in.Woken(); !s.ok()) {
          failed = s;
          end_input("input error");
        }
      }
      ++k;
    }
    if (readable && reading && splicing && sp.wait == SpliceState::Wait::kInput) {
      // Bytes came: they are spliced at the top of the loop. Read only to see the end.
      Result<size_t> available = splicer->Available();
      if (available.ok() && *available > 0) readable = false;
    }
    if (readable && reading) {
      bool ended = false;
      // Splicing: the copied bytes end at a line end where they can, so the buffer empties and
      // splicing goes on.
      Result<size_t> n = splicer
                             ? splicer->ReadCut(buf.data() + tail,
                                                std::min(buf.size() - tail, o_.block_bytes), &ended)
                             : in.Read(buf.data() + tail, buf.size() - tail, &ended);
      if (!n.ok()) {
        failed = n.status();
        end_input("input error");
      } else if (*n > 0) {
        tail += *n;
        last_input = Clock::now();
      } else if (ended) {
        at_eof = true;
        end_input("end of input");
      }
    }
    for (size_t j = 0; j < who.size(); ++j, ++k) {
      Sink& s = sinks[who[j]];
      if ((fds[k].events & POLLIN) != 0 && (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        ReadLeaveWord(s);
      }
      // A sink polled only for splice room (or its reader's word) has no block of its own:
      // Flush does nothing.
      if (fds[k].revents != 0) Flush(s, &stats_);
    }
  }
  for (Sink& s : sinks) {
    if (!s.dead && s.size > 0) stats_.lost_bytes += s.size - s.done;
  }
  stats_.where = in.Where();
  return failed;  // the sinks close with `sinks`
}

}  // namespace ferry::models
