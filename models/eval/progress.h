// Progress display for training: samples/s, current train loss, last AUC, ETA.
//
//   TTY      one line redrawn in place with '\r', at most 1 / min_redraw_s times a second:
//            [#########---------------]  37.5%  1.23M/3.28M  152.0k samples/s  loss 0.4712
//            auc 0.7788  ETA 13s
//   not TTY  a plain line every plain_interval_s seconds (logs and CI stay readable):
//            progress: 37.5% 1228800/3276800 samples, 152003 samples/s, loss 0.4712, ...
// Percentages, the bar's fill and the ETA appear only when the total is known. The rate is an
// exponential moving average (time constant kRateTau) of the rate between draws, so pauses for
// evaluation fade out instead of dragging the average for the rest of the run.
//
// Testable: the output stream, the tty flag and the clock are injected.
// Thread-safety: none; call from the training loop's thread. Blocking: writes to the stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <string_view>

namespace ferry::models {

// isatty(fd), e.g. IsTerminal(STDERR_FILENO) for ProgressOptions::tty.
bool IsTerminal(int fd);

struct ProgressOptions {
  bool tty = false;
  double min_redraw_s = 0.1;       // TTY: at most ~10 redraws per second
  double plain_interval_s = 10.0;  // not TTY: one line every this many seconds
  uint64_t total_samples = 0;      // 0 = unknown: no percentage, no ETA
  int bar_width = 24;
};

// What to show; NaN fields are left out of the line.
struct ProgressState {
  uint64_t samples = 0;  // processed so far
  double train_logloss = std::numeric_limits<double>::quiet_NaN();
  double last_auc = std::numeric_limits<double>::quiet_NaN();
};

class ProgressDisplay {
 public:
  static constexpr double kRateTau = 3.0;  // seconds
  // Monotonic seconds; the default reads std::chrono::steady_clock.
  using Clock = std::function<double()>;
  static double SteadySeconds();

  // `out` must outlive the display. Time starts at construction.
  ProgressDisplay(std::ostream& out, ProgressOptions options, Clock clock = &SteadySeconds);

  // Draws `state` if a redraw is due; returns whether it drew. Cheap when not due (one clock
  // read), so it can be called every minibatch.
  bool Update(const ProgressState& state);
  // Writes a whole line (an eval result, a warning) without garbling the bar: on a TTY the bar
  // is erased first and redrawn by the next Update.
  void Print(std::string_view line);
  // Draws `state` unconditionally and ends the line; call once at the end.
  void Finish(const ProgressState& state);

  // The text of one draw, without '\r' / '\n' (what Update would print now).
  std::string Format(const ProgressState& state, double now) const;
  double rate() const { return rate_; }

 private:
  void Draw(const ProgressState& state, double now);
  void UpdateRate(uint64_t samples, double now);

  std::ostream& out_;
  ProgressOptions options_;
  Clock clock_;
  double start_ = 0.0;
  double last_draw_ = -std::numeric_limits<double>::infinity();
  double rate_time_ = 0.0;     // when rate_ was last updated
  uint64_t rate_samples_ = 0;  // samples at rate_time_
  double rate_ = 0.0;          // samples per second (EMA)
  bool have_rate_ = false;
  size_t drawn_length_ = 0;  // TTY: characters of the bar currently on screen
};

// "999", "12.3k", "1.23M", "4.56G".
std::string HumanCount(double value);
// "12s", "4m05s", "1h02m03s"; "?" for a negative or non-finite duration.
std::string HumanDuration(double seconds);

}  // namespace ferry::models
