// ps/wire: everything that crosses the wire between the members of a job, as bytes. Depends on
// job/ (a control message carries a JobSpec) and store/ (through job/); nothing here sends or
// receives: servers, workers and the coordinator do, through the transport.
//
//   protocol.h    data-plane frames: pull/push requests in a server's ring, replies, slot replies
//                 for one-sided pulls; Parse* refuse malformed frames with Code::kProtocol
//   control.h     control-plane messages (hello, barriers, clocks, checkpoints, failover), encoded
//                 with FlatBuffers (schema/control.fbs)
//   row_format.h  the server row as a one-sided reader sees it
//
// Threading: pure functions and value types.
#pragma once

#include "ps/wire/control.h"
#include "ps/wire/protocol.h"
#include "ps/wire/row_format.h"
