// Asynchronous device events (ibv_get_async_event), shared per device context.
//
// librdmacm hands every transport in a process the SAME ibv_context per device, so its async_fd
// is shared: whichever transport reads an event forwards a copy to every transport subscribed to
// that context (AsyncHub), and each keeps only what concerns it (its QPs, its port, the device).
// Thread-safety: AsyncHub and AsyncInbox are internally locked; the inbox mutex is a leaf lock.
#pragma once

#include <infiniband/verbs.h>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace ferry::verbs {

struct AsyncNote {
  ibv_event_type type;
  uint32_t qpn = 0xffffffffu;  // QP events
  uint8_t port = 0;            // port events
};

struct AsyncInbox {
  std::mutex mu;
  std::vector<AsyncNote> notes;
};

class AsyncHub {
 public:
  static AsyncHub& Get();
  std::shared_ptr<AsyncInbox> Subscribe(ibv_context* ctx);
  void Unsubscribe(ibv_context* ctx, const std::shared_ptr<AsyncInbox>& inbox);
  // Reads every pending event of ctx (non-blocking), acks it, and copies it to all inboxes.
  void Drain(ibv_context* ctx);

 private:
  std::mutex mu_;
  std::map<ibv_context*, std::vector<std::shared_ptr<AsyncInbox>>> subscribers_;
};

}  // namespace ferry::verbs
