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

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <utility>

#include "transport/common/fd.h"
#include "transport/common/owned.h"

namespace ferry::verbs {

using common::Owned;
using common::SetNonBlocking;
using common::UniqueFd;

namespace detail {
inline void FreeDevices(ibv_context* list) {
  // Owned<> stores the first element's address of the array rdma_get_devices() returned.
  rdma_free_devices(reinterpret_cast<ibv_context**>(list));
}
inline void ClosePd(ibv_pd* p) {
  (void)ibv_dealloc_pd(p);
}
inline void DeregMr(ibv_mr* p) {
  (void)ibv_dereg_mr(p);
}
inline void DestroyCq(ibv_cq* p) {
  (void)ibv_destroy_cq(p);
}
inline void DestroyChannel(ibv_comp_channel* p) {
  (void)ibv_destroy_comp_channel(p);
}
inline void DestroySrq(ibv_srq* p) {
  (void)ibv_destroy_srq(p);
}
inline void DestroyAh(ibv_ah* p) {
  (void)ibv_destroy_ah(p);
}
inline void DestroyCmId(rdma_cm_id* p) {
  (void)rdma_destroy_id(p);
}
inline void DestroyCmChannel(rdma_event_channel* p) {
  rdma_destroy_event_channel(p);
}
}  // namespace detail

// librdmacm's device list: the ibv_context objects librdmacm itself uses, so a PD/CQ created on
// them can serve QPs attached to rdma_cm ids. Stored as ibv_context** cast to its first element.
class DeviceList {
 public:
  DeviceList() = default;
  DeviceList(ibv_context** list, int count)
      : list_(reinterpret_cast<ibv_context*>(list)), count_(count) {}
  ibv_context* at(int i) const { return reinterpret_cast<ibv_context**>(list_.get())[i]; }
  int size() const { return count_; }
  explicit operator bool() const { return static_cast<bool>(list_); }

 private:
  Owned<ibv_context*, detail::FreeDevices> list_;
  int count_ = 0;
};

using ProtectionDomain = Owned<ibv_pd*, detail::ClosePd>;
using MemoryRegistration = Owned<ibv_mr*, detail::DeregMr>;
using CompletionQueue = Owned<ibv_cq*, detail::DestroyCq>;
using CompletionChannel = Owned<ibv_comp_channel*, detail::DestroyChannel>;
using SharedReceiveQueue = Owned<ibv_srq*, detail::DestroySrq>;
using AddressHandle = Owned<ibv_ah*, detail::DestroyAh>;
using CmId = Owned<rdma_cm_id*, detail::DestroyCmId>;
using CmEventChannel = Owned<rdma_event_channel*, detail::DestroyCmChannel>;

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

}  // namespace ferry::verbs
