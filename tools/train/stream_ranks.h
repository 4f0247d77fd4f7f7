// A stream (--train - or a FIFO, --follow DIR or FILE) under ferry-launch, mpirun or srun: rank 0
// alone reads it and deals it to every worker rank, one TCP connection each, the way ferry-train's
// own local cluster deals it over pipes (stream_launch.h, models/data/stream_dealer.h).
//
//   rank 0                                      worker w (any rank)
//   listens on the dealer address               connects, retrying while rank 0 is not listening
//   accepts one connection per worker   <-----  "ferry-stream 1 <coordinator> <w>\n"
//                                       ----->  "ferry-stream ok\n", then its share of the lines
//   StreamDealer over the connections           the connection becomes its standard input, read
//   (EOF, --max-samples, --idle-exit, Stop)     as a dealt share (FERRY_TRAIN_STREAM=dealt)
//
// Where: every rank knows the coordinator's "host:port" (ps/launch/rendezvous.h), so the dealer
// needs no exchange of its own: it listens on the coordinator's host at the first free port of
// the kStreamPortTries after the coordinator's, which the workers try in the same order, or at
// FERRY_STREAM_PORT when that is set (give every rank the same; the way out when all those are
// taken, which fails the job at rank 0 naming the variable).
// rank 0 binds the coordinator's host when it is a numeric address (127.0.0.1 on one host), the
// wildcard when it is a host name (as the coordinator itself listens then). The coordinator's
// address in the hello keeps apart two jobs whose dealer ports meet.
//
// Worker join slots (ferry-train --worker-join-slots J, an elastic job): rank 0 goes on listening
// while the stream runs, and worker W + j's hello (j < J) adds its connection to the dealer
// (models/data/stream_dealer.h DealerOptions::open), which deals to it from its next block; once
// the stream has ended it gets an empty share. A worker that leaves the job shuts down its
// writing side of the connection (models::StopDealingTo): it is dealt nothing more, reads what it
// was dealt to the end, trains it and goes; the rest goes to the others.
//
// Waits, all bounded by kStreamConnectTimeout: rank 0 accepting every worker, a worker reaching
// rank 0 and being answered. A worker that never comes fails the job at rank 0, naming it.
//
// The end, as on the local cluster: the input's end, --max-samples (cut by the dealer, exact over
// all workers), --idle-exit, or the first SIGINT, SIGTERM or SIGHUP that rank 0 receives end the
// stream; the workers finish with what they were dealt (a second signal kills rank 0 as usual).
// A worker that dies fails the job through the coordinator; the dealer drops its connection.
//
// Thread-safety: the main thread. RankStreamDealer installs signal handlers while it lives.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "models/data/stream_dealer.h"
#include "models/train/train_options.h"
#include "transport/status.h"

namespace ferry::train {

inline constexpr char kStreamPortEnv[] = "FERRY_STREAM_PORT";
inline constexpr std::chrono::seconds kStreamConnectTimeout{60};

// Ports after the coordinator's that rank 0's dealer tries, in order, without FERRY_STREAM_PORT.
inline constexpr uint16_t kStreamPortTries = 8;

// The dealer's "host:port" candidates, in the order rank 0 tries to listen and the workers to
// connect: the coordinator's host with `port_override` (FERRY_STREAM_PORT's value; nullptr or ""
// when unset) alone, or else the kStreamPortTries ports after the coordinator's (one of them may
// be taken: the coordinator's port is an ephemeral one, and its neighbours are other sockets'
// ephemeral ports). Pure; kInvalidArgument for a bad address or port, naming it.
Result<std::vector<std::string>> StreamDealerAddresses(const std::string& coordinator,
                                                       const char* port_override);

// Rank 0's part.
class RankStreamDealer {
 public:
  // Listens on the dealer address, accepts one connection from each of `workers` workers (within
  // kStreamConnectTimeout), starts dealing o's stream to them and handles SIGINT, SIGTERM and
  // SIGHUP (the first one ends the stream). Blocks until every worker connected.
  // own_worker >= 0: rank 0 is also that worker (the colocated rule). Its share goes through a
  // pipe that becomes this process's standard input (a stream on standard input is read from a
  // duplicate taken first, "/dev/fd/N"). join_slots > 0: the worker join slots W..W+J-1 may
  // connect while the stream runs (a thread of its own accepts them until Finish).
  static Result<std::unique_ptr<RankStreamDealer>> Start(const models::TrainOptions& o,
                                                         const std::string& coordinator,
                                                         uint32_t workers, int own_worker,
                                                         uint32_t join_slots = 0);
  ~RankStreamDealer();  // restores the signal dispositions; stops the dealer if Finish did not
  RankStreamDealer(const RankStreamDealer&) = delete;
  RankStreamDealer& operator=(const RankStreamDealer&) = delete;

  // Ends the stream (if it has not ended), waits for the dealer and reports it as the local
  // cluster does (stream_launch.h ReportDealtStream); the exit code given `job_code`.
  int Finish(const models::TrainOptions& o, int job_code);

  // Set once the stream's input has ended (anything dealt after is what was read before); valid
  // after this object is gone (a worker join's gate at the coordinator reads it).
  std::shared_ptr<const std::atomic<bool>> ended_flag() const { return dealer_->ended_flag(); }

 private:
  explicit RankStreamDealer(std::unique_ptr<models::StreamDealer> dealer);
  void RestoreSignals();
  // The join slots' connections [first, end), until wake_ (StopJoiners).
  void AcceptJoiners(const std::string& expect, uint32_t first, uint32_t end);
  void StopJoiners();

  // Declared first, destroyed last: the dealer may still be opening "/dev/fd/N" of it.
  models::Fd saved_stdin_;
  std::unique_ptr<models::StreamDealer> dealer_;
  bool signals_ = false;
  models::Fd listener_;  // join slots: kept listening
  models::Fd wake_;
  std::thread joiners_;
};

// A worker's part: connects to rank 0's dealer (within kStreamConnectTimeout) and makes the
// connection this process's standard input (descriptor 0), from which the trainer reads its
// share. Errors name the worker and the dealer address.
Status ReceiveDealtStream(const std::string& coordinator, uint32_t worker);

// A rank other than 0 under srun: reads its standard input to the end on a thread of its own and
// drops it. srun's default --input=all gives every task a copy of the stream and stops feeding
// them all while one copy is unread; with --input=0 (the better way) this reads an empty
// /dev/null and ends at once.
void DrainStandardInput();

}  // namespace ferry::train
