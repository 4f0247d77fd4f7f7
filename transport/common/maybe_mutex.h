// MaybeMutex: a backend's transport lock that is a real mutex under ThreadMode::kMulti and does
// nothing under ThreadMode::kSingle (transport.h, "Threading"), so one body of code serves both
// modes and the single-threaded data path takes no lock at all.
//
// Contract: BasicLockable + try_lock, so std::lock_guard, std::unique_lock and
// std::condition_variable_any work with it. The mode is fixed at construction. Disabled, every
// call is a no-op that "succeeds": the caller's promise of one thread at a time is what protects
// the guarded state then. CheckThreadMode (maybe_mutex.cc) is the creation-time rule every backend
// applies before it builds one.
#pragma once

#include <mutex>
#include <string_view>

#include "transport/status.h"
#include "transport/transport.h"

namespace ferry::common {

class MaybeMutex {
 public:
  explicit MaybeMutex(ThreadMode mode) : enabled_(mode == ThreadMode::kMulti) {}
  MaybeMutex(const MaybeMutex&) = delete;
  MaybeMutex& operator=(const MaybeMutex&) = delete;

  void lock() {
    if (enabled_) mu_.lock();
  }
  void unlock() {
    if (enabled_) mu_.unlock();
  }
  bool try_lock() { return !enabled_ || mu_.try_lock(); }
  bool enabled() const { return enabled_; }

 private:
  std::mutex mu_;
  const bool enabled_;
};

// kInvalidArgument when `options` asks for what ThreadMode::kSingle rules out (an internal
// progress thread would call into the transport beside the caller), naming `backend`.
Status CheckThreadMode(const TransportOptions& options, std::string_view backend);

}  // namespace ferry::common
