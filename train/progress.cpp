#include "train/progress.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace kiln::train {

namespace {

constexpr int kBarWidth = 20;
constexpr double kRedrawInterval = 0.1;  // seconds between terminal redraws

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string format(const char* fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, value);
  return buf;
}

}  // namespace

bool stdout_is_terminal() { return isatty(fileno(stdout)) == 1; }

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-:--:--";
  const auto total = static_cast<int64_t>(seconds);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  return buf;
}

Progress::Progress(int64_t total_steps, std::ostream& out, bool is_terminal, int64_t start_step, Clock clock)
    : total_steps_(total_steps),
      out_(out),
      is_terminal_(is_terminal),
      start_step_(start_step),
      clock_(clock ? std::move(clock) : Clock(steady_seconds)),
      start_time_(clock_()),
      last_step_(start_step) {
  KILN_CHECK(total_steps >= 1, "Progress: total_steps must be >= 1, got ", total_steps);
  KILN_CHECK(start_step >= 0 && start_step <= total_steps, "Progress: start_step ", start_step, " is outside [0, ",
             total_steps, "]");
}

Progress::~Progress() {
  // Leave the terminal on a fresh line if training stopped early (an error
  // message printed next would otherwise follow the bar).
  if (line_open_) out_ << '\n' << std::flush;
}

std::string Progress::status_text(int64_t step, const std::map<std::string, double>& values, double elapsed) const {
  std::string text = std::to_string(step) + "/" + std::to_string(total_steps_);
  const auto show = [&](const char* key, const char* label, const char* fmt) {
    const auto it = values.find(key);
    if (it != values.end()) text += std::string(" ") + label + " " + format(fmt, it->second);
  };
  show("loss", "loss", "%.4f");
  show("lr", "lr", "%.3e");
  show("tokens_per_s", "tok/s", "%.0f");
  for (const auto& [key, value] : values) {
    if (key == "loss" || key == "lr" || key == "tokens_per_s") continue;
    text += " " + key + " " + format("%.4g", value);
  }
  if (!is_terminal_) text += " elapsed " + format_duration(elapsed);
  const int64_t done = step - start_step_;
  const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_steps_ - step) : -1.0;
  text += " ETA " + format_duration(eta);
  return text;
}

void Progress::draw_terminal_line(const std::string& line) {
  std::string padded = line;
  if (padded.size() < drawn_width_) padded.append(drawn_width_ - padded.size(), ' ');
  out_ << '\r' << padded << std::flush;
  drawn_width_ = line.size();
  line_open_ = true;
}

void Progress::update(int64_t step, const std::map<std::string, double>& values) {
  KILN_CHECK(step >= start_step_ && step <= total_steps_, "Progress::update: step ", step, " is outside [", start_step_,
             ", ", total_steps_, "]");
  last_step_ = step;
  const double now = clock_();
  const double elapsed = now - start_time_;
  if (!is_terminal_) {
    out_ << "step " << status_text(step, values, elapsed) << '\n' << std::flush;
    return;
  }
  if (step != total_steps_ && last_draw_time_ >= 0 && now - last_draw_time_ < kRedrawInterval) return;
  last_draw_time_ = now;
  const int filled = static_cast<int>(kBarWidth * step / total_steps_);
  std::string line(1, '[');
  line.append(static_cast<size_t>(filled), '#').append(static_cast<size_t>(kBarWidth - filled), '.').append("] ");
  draw_terminal_line(line + status_text(step, values, elapsed));
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (line_open_) out_ << '\n';
  line_open_ = false;
  out_ << "done " << last_step_ << "/" << total_steps_ << " in " << format_duration(clock_() - start_time_) << '\n'
       << std::flush;
}

}  // namespace kiln::train
