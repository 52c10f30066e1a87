// Training progress on the console.
//
// On a terminal: one line redrawn in place with '\r' —
//   [##########..........] 500/1000 loss 2.3456 lr 1.000e-04 tok/s 12345 ETA 0:01:23
// at most every 0.1 s (and always for the last step), padded with spaces to
// erase a longer previous line. Elsewhere (a log file, a pipe): one plain line
// per update() call, so the caller sets the cadence (e.g. --logging-steps):
//   step 500/1000 loss 2.3456 lr 1.000e-04 tok/s 12345 elapsed 0:01:23 ETA 0:01:23
//
// Known keys of `values` are shown in this order and format: "loss" (%.4f),
// "lr" (%.3e), "tokens_per_s" as tok/s (%.0f); any other key follows in
// key order as "key %.4g". Missing keys are left out.
// ETA = elapsed / (step - start_step) * (total_steps - step), with elapsed
// time measured from construction; "-:--:--" before the first step is done.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>

namespace kiln::train {

// isatty(fileno(stdout)).
bool stdout_is_terminal();

// h:mm:ss (hours unbounded), seconds rounded down; "-:--:--" for negative or
// non-finite input.
std::string format_duration(double seconds);

class Progress {
 public:
  // Seconds on a monotonic clock; replaceable for tests.
  using Clock = std::function<double()>;

  // total_steps >= 1; 0 <= start_step <= total_steps (a resumed run starts
  // past 0, and its ETA counts only the steps done in this process).
  // `out` must outlive the Progress.
  Progress(int64_t total_steps, std::ostream& out, bool is_terminal, int64_t start_step = 0, Clock clock = {});
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // step in [start_step, total_steps] (kiln::Error otherwise).
  void update(int64_t step, const std::map<std::string, double>& values);
  // Ends the terminal line and prints "done <step>/<total> in h:mm:ss" on its
  // own line. Later calls do nothing.
  void finish();

 private:
  std::string status_text(int64_t step, const std::map<std::string, double>& values, double elapsed) const;
  void draw_terminal_line(const std::string& line);

  int64_t total_steps_;
  std::ostream& out_;
  bool is_terminal_;
  int64_t start_step_;
  Clock clock_;
  double start_time_;
  double last_draw_time_ = -1.0;
  int64_t last_step_;
  size_t drawn_width_ = 0;  // characters of the line now on the terminal
  bool line_open_ = false;  // a terminal line is drawn without its newline
  bool finished_ = false;
};

}  // namespace kiln::train
