// Progress display: formatting, throttling, and the rate estimate.
#include "models/eval/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

namespace ferry::models {

bool IsTerminal(int fd) {
  return ::isatty(fd) == 1;
}

double ProgressDisplay::SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string HumanCount(double value) {
  char buf[32];
  const double a = std::fabs(value);
  if (a < 1e3) {
    std::snprintf(buf, sizeof(buf), "%.0f", value);
  } else if (a < 1e6) {
    std::snprintf(buf, sizeof(buf), "%.1fk", value / 1e3);
  } else if (a < 1e9) {
    std::snprintf(buf, sizeof(buf), "%.2fM", value / 1e6);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2fG", value / 1e9);
  }
  return buf;
}

std::string HumanDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e9) return "?";
  const uint64_t s = static_cast<uint64_t>(std::llround(seconds));
  char buf[48];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%llus", static_cast<unsigned long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%llum%02llus", static_cast<unsigned long long>(s / 60),
                  static_cast<unsigned long long>(s % 60));
  } else {
    std::snprintf(
        buf, sizeof(buf), "%lluh%02llum%02llus", static_cast<unsigned long long>(s / 3600),
        static_cast<unsigned long long>(s / 60 % 60), static_cast<unsigned long long>(s % 60));
  }
  return buf;
}

ProgressDisplay::ProgressDisplay(std::ostream& out, ProgressOptions options, Clock clock)
    : out_(out), options_(options), clock_(std::move(clock)) {
  start_ = clock_();
  rate_time_ = start_;
  // Non-TTY: the first line comes one interval after the start, not at once.
  if (!options_.tty) last_draw_ = start_;
}

void ProgressDisplay::UpdateRate(uint64_t samples, double now) {
  const double dt = now - rate_time_;
  if (dt <= 0.0 || samples < rate_samples_) return;
  const double instant = static_cast<double>(samples - rate_samples_) / dt;
  if (!have_rate_) {
    rate_ = instant;
    have_rate_ = true;
  } else {
    // EMA over time, not over calls: the weight of the new sample grows with the time it covers.
    const double alpha = 1.0 - std::exp(-dt / kRateTau);
    rate_ += alpha * (instant - rate_);
  }
  rate_time_ = now;
  rate_samples_ = samples;
}

std::string ProgressDisplay::Format(const ProgressState& state, double now) const {
  const uint64_t total = options_.total_samples;
  const double done = static_cast<double>(state.samples);
  const double fraction = total > 0 ? std::min(1.0, done / static_cast<double>(total)) : 0.0;
  char buf[64];
  std::string line;
  if (options_.tty) {
    if (total > 0) {
      const int width = std::max(1, options_.bar_width);
      const int filled = static_cast<int>(fraction * width);
      line += '[';
      line.append(static_cast<size_t>(filled), '#');
      line.append(static_cast<size_t>(width - filled), '-');
      line += "] ";
      std::snprintf(buf, sizeof(buf), "%5.1f%%  ", 100.0 * fraction);
      line += buf;
      line += HumanCount(done) + "/" + HumanCount(static_cast<double>(total));
    } else {
      line += HumanCount(done) + " samples";
    }
    line += "  " + HumanCount(rate_) + " samples/s";
    if (!std::isnan(state.train_logloss)) {
      std::snprintf(buf, sizeof(buf), "  loss %.4f", state.train_logloss);
      line += buf;
    }
    if (!std::isnan(state.last_auc)) {
      std::snprintf(buf, sizeof(buf), "  auc %.4f", state.last_auc);
      line += buf;
    }
    if (total > 0 && rate_ > 0.0) {
      line += "  ETA " + HumanDuration((static_cast<double>(total) - done) / rate_);
    }
    return line;
  }
  line = "progress: ";
  if (total > 0) {
    std::snprintf(buf, sizeof(buf), "%.1f%% ", 100.0 * fraction);
    line += buf;
    line += std::to_string(state.samples) + "/" + std::to_string(total) + " samples";
  } else {
    line += std::to_string(state.samples) + " samples";
  }
  std::snprintf(buf, sizeof(buf), ", %.0f samples/s", rate_);
  line += buf;
  if (!std::isnan(state.train_logloss)) {
    std::snprintf(buf, sizeof(buf), ", loss %.4f", state.train_logloss);
    line += buf;
  }
  if (!std::isnan(state.last_auc)) {
    std::snprintf(buf, sizeof(buf), ", auc %.4f", state.last_auc);
    line += buf;
  }
  if (total > 0 && rate_ > 0.0) {
    line += ", ETA " + HumanDuration((static_cast<double>(total) - done) / rate_);
  }
  line += ", elapsed " + HumanDuration(now - start_);
  return line;
}

void ProgressDisplay::Draw(const ProgressState& state, double now) {
  UpdateRate(state.samples, now);
  const std::string line = Format(state, now);
  if (options_.tty) {
    out_ << '\r' << line;
    // Blank out the tail of a longer previous line.
    if (line.size() < drawn_length_) out_ << std::string(drawn_length_ - line.size(), ' ');
    drawn_length_ = line.size();
  } else {
    out_ << line << '\n';
  }
  out_.flush();
  last_draw_ = now;
}

bool ProgressDisplay::Update(const ProgressState& state) {
  const double now = clock_();
  const double interval = options_.tty ? options_.min_redraw_s : options_.plain_interval_s;
  if (now - last_draw_ < interval) return false;
  Draw(state, now);
  return true;
}

void ProgressDisplay::Print(std::string_view line) {
  if (options_.tty && drawn_length_ > 0) {
    out_ << '\r' << std::string(drawn_length_, ' ') << '\r';
    drawn_length_ = 0;
    last_draw_ = -std::numeric_limits<double>::infinity();  // redraw at the next Update
  }
  out_ << line << '\n';
  out_.flush();
}

void ProgressDisplay::Finish(const ProgressState& state) {
  Draw(state, clock_());
  if (options_.tty) {
    out_ << '\n';
    out_.flush();
    drawn_length_ = 0;
  }
}

}  // namespace ferry::models
