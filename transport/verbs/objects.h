// Move-only RAII owners, one per verbs / rdma_cm object.
//
// Each owner destroys exactly one object, once. Classes that hold several of them declare the
// members in construction order, so C++'s reverse-order destruction gives the order verbs
// requires: QP (and AH) before SRQ before CQ before completion channel before MR before PD before
// the device context; an rdma_cm id after its QP and before its event channel.
// Destroy functions' return codes are ignored on purpose: there is nobody left to report to, and
// a failure there means the kernel already tore the object down (device removal, process exit).
// Thread-safety: none (owned by one object that is itself guarded).
#pragma once

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <utility>

namespace ferry::verbs {

template <typename T, void (*Destroy)(T*)>
class Owned {
 public:
  Owned() = default;
  explicit Owned(T* p) : p_(p) {}
  Owned(Owned&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() { reset(); }

  void reset() {
    if (p_ != nullptr) Destroy(std::exchange(p_, nullptr));
  }
  // Gives up ownership without destroying (e.g. an rdma_cm id that must outlive its event).
  T* release() { return std::exchange(p_, nullptr); }
  T* get() const { return p_; }
  T* operator->() const { return p_; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  T* p_ = nullptr;
};

namespace detail {
inline void FreeDevices(ibv_context* list) {
  // Owned<> stores the first element's address of the array rdma_get_devices() returned.
  rdma_free_devices(reinterpret_cast<ibv_context**>(list));
}
inline void ClosePd(ibv_pd* p) { (void)ibv_dealloc_pd(p); }
inline void DeregMr(ibv_mr* p) { (void)ibv_dereg_mr(p); }
inline void DestroyCq(ibv_cq* p) { (void)ibv_destroy_cq(p); }
inline void DestroyChannel(ibv_comp_channel* p) { (void)ibv_destroy_comp_channel(p); }
inline void DestroySrq(ibv_srq* p) { (void)ibv_destroy_srq(p); }
inline void DestroyAh(ibv_ah* p) { (void)ibv_destroy_ah(p); }
inline void DestroyCmId(rdma_cm_id* p) { (void)rdma_destroy_id(p); }
inline void DestroyCmChannel(rdma_event_channel* p) { rdma_destroy_event_channel(p); }
}  // namespace detail

// librdmacm's device list: the ibv_context objects librdmacm itself uses, so a PD/CQ created on
// them can serve QPs attached to rdma_cm ids. Stored as ibv_context** cast to its first element.
class DeviceList {
 public:
  DeviceList() = default;
  DeviceList(ibv_context** list, int count) : list_(reinterpret_cast<ibv_context*>(list)), count_(count) {}
  ibv_context* at(int i) const { return reinterpret_cast<ibv_context**>(list_.get())[i]; }
  int size() const { return count_; }
  explicit operator bool() const { return static_cast<bool>(list_); }

 private:
  Owned<ibv_context, detail::FreeDevices> list_;
  int count_ = 0;
};

using ProtectionDomain = Owned<ibv_pd, detail::ClosePd>;
using MemoryRegistration = Owned<ibv_mr, detail::DeregMr>;
using CompletionQueue = Owned<ibv_cq, detail::DestroyCq>;
using CompletionChannel = Owned<ibv_comp_channel, detail::DestroyChannel>;
using SharedReceiveQueue = Owned<ibv_srq, detail::DestroySrq>;
using AddressHandle = Owned<ibv_ah, detail::DestroyAh>;
using CmId = Owned<rdma_cm_id, detail::DestroyCmId>;
using CmEventChannel = Owned<rdma_event_channel, detail::DestroyCmChannel>;

// A QP created either with ibv_create_qp (out-of-band mode) or with rdma_create_qp on an
// rdma_cm id (cm mode; destroyed with rdma_destroy_qp, which must run before rdma_destroy_id).
class QueuePair {
 public:
  QueuePair() = default;
  explicit QueuePair(ibv_qp* qp) : qp_(qp) {}
  QueuePair(rdma_cm_id* id) : qp_(id->qp), id_(id) {}  // NOLINT: cm-owned QP
  QueuePair(QueuePair&& o) noexcept
      : qp_(std::exchange(o.qp_, nullptr)), id_(std::exchange(o.id_, nullptr)) {}
  QueuePair& operator=(QueuePair&& o) noexcept {
    if (this != &o) {
      reset();
      qp_ = std::exchange(o.qp_, nullptr);
      id_ = std::exchange(o.id_, nullptr);
    }
    return *this;
  }
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;
  ~QueuePair() { reset(); }

  void reset() {
    if (id_ != nullptr) {
      rdma_destroy_qp(id_);
    } else if (qp_ != nullptr) {
      (void)ibv_destroy_qp(qp_);
    }
    qp_ = nullptr;
    id_ = nullptr;
  }
  ibv_qp* get() const { return qp_; }
  ibv_qp* operator->() const { return qp_; }
  explicit operator bool() const { return qp_ != nullptr; }

 private:
  ibv_qp* qp_ = nullptr;
  rdma_cm_id* id_ = nullptr;
};

// A file descriptor (the out-of-band TCP control connection and listener).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  void reset() {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

inline bool SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

}  // namespace ferry::verbs
