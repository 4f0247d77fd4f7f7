// Move-only RAII owners, one per UCX object this backend creates.
//
// Each owner releases exactly one handle with the UCX call that matches its creation. Owners
// that need a parent handle to release (a memory handle needs its context) keep a non-owning copy
// of it; the parent must outlive them, which the declaration order of the members of
// UcxTransport guarantees (see ucx_transport.h).
//
// Endpoints are the exception to "release in the destructor": closing a ucp_ep_h is an
// asynchronous request that needs worker progress, so EpHandle::Close() starts it and hands the
// request to the caller, which keeps progressing the worker until it completes.
// Thread-safety: none; the transport's mutex guards every owner that touches the worker.
#pragma once

#include <ucp/api/ucp.h>

#include <utility>

#include "transport/common/fd.h"
#include "transport/common/owned.h"

namespace ferry::ucx {

using common::Owned;
using common::UniqueFd;

using ConfigHandle = Owned<ucp_config_t*, &ucp_config_release>;
using ContextHandle = Owned<ucp_context_h, &ucp_cleanup>;
using WorkerHandle = Owned<ucp_worker_h, &ucp_worker_destroy>;
using RkeyHandle = Owned<ucp_rkey_h, &ucp_rkey_destroy>;
using RkeyBuffer = Owned<void*, &ucp_rkey_buffer_release>;

// ucp_mem_map / ucp_mem_unmap; the context must outlive the handle.
class MemHandle {
 public:
  MemHandle() = default;
  MemHandle(ucp_context_h context, ucp_mem_h memh) : context_(context), memh_(memh) {}
  ~MemHandle() { reset(); }
  MemHandle(MemHandle&& o) noexcept
      : context_(o.context_), memh_(std::exchange(o.memh_, nullptr)) {}
  MemHandle& operator=(MemHandle&& o) noexcept {
    if (this != &o) {
      reset();
      context_ = o.context_;
      memh_ = std::exchange(o.memh_, nullptr);
    }
    return *this;
  }
  MemHandle(const MemHandle&) = delete;
  MemHandle& operator=(const MemHandle&) = delete;

  ucp_mem_h get() const { return memh_; }
  void reset() {
    if (memh_ != nullptr) ucp_mem_unmap(context_, std::exchange(memh_, nullptr));
  }

 private:
  ucp_context_h context_ = nullptr;
  ucp_mem_h memh_ = nullptr;
};

// ucp_ep_create / ucp_ep_close_nbx. The destructor of a still-open handle force-closes it and
// drives the worker until UCX has released it (used only on teardown paths).
class EpHandle {
 public:
  EpHandle() = default;
  EpHandle(ucp_worker_h worker, ucp_ep_h ep) : worker_(worker), ep_(ep) {}
  ~EpHandle() { ForceCloseAndWait(); }
  EpHandle(EpHandle&& o) noexcept : worker_(o.worker_), ep_(std::exchange(o.ep_, nullptr)) {}
  EpHandle& operator=(EpHandle&& o) noexcept {
    if (this != &o) {
      ForceCloseAndWait();
      worker_ = o.worker_;
      ep_ = std::exchange(o.ep_, nullptr);
    }
    return *this;
  }
  EpHandle(const EpHandle&) = delete;
  EpHandle& operator=(const EpHandle&) = delete;

  ucp_ep_h get() const { return ep_; }
  // Starts closing: returns a request the caller must progress and free, or nullptr if the
  // close finished at once (or failed; the endpoint is gone either way).
  void* Close(bool force) {
    if (ep_ == nullptr) return nullptr;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t req = ucp_ep_close_nbx(std::exchange(ep_, nullptr), &param);
    if (req == nullptr || UCS_PTR_IS_ERR(req)) return nullptr;
    return req;
  }

 private:
  void ForceCloseAndWait() {
    void* req = Close(/*force=*/true);
    if (req == nullptr) return;
    while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(worker_);
    ucp_request_free(req);
  }

  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
};

}  // namespace ferry::ucx
