// Work dealing at the coordinator (Worker::TakeWork): each item of a pass goes to exactly one
// worker, whichever asks next. Elastic jobs use it to share their data among the workers of the
// moment: a worker that joins asks too, and one that leaves stops asking (models/data/reader.h
// "Dealt input").
#include <string>

#include "ps/coordinator/coordinator.h"
#include "ps/coordinator/coordinator_state.h"

namespace ferry::ps {

void Coordinator::Impl::OnWorkTake(const Member& m, const ControlMessage& msg) {
  // msg.value: the pass; msg.value2: its item count (the same from every worker).
  if (m.info.role != Role::kWorker || m.joining) return;
  ControlMessage r;
  r.kind = ControlKind::kWorkTake;
  r.value = msg.value;
  r.value2 = kNoWork;
  if (msg.value2 == 0 || msg.value2 > kMaxWorkItems) {
    r.text = "a pass of " + std::to_string(msg.value2) + " items (1.." +
             std::to_string(kMaxWorkItems) + ")";
  } else {
    WorkPass& p = work[msg.value];
    if (p.items == 0) p.items = msg.value2;
    if (p.items != msg.value2) {
      r.text = "worker " + std::to_string(m.info.index) + " counts " + std::to_string(msg.value2) +
               " items in pass " + std::to_string(msg.value) + ", another worker " +
               std::to_string(p.items) + " (every worker must plan the same inputs)";
    } else if (p.next < p.items) {
      r.value2 = p.next++;
    }
  }
  Send(m.ep, r);
}

}  // namespace ferry::ps
