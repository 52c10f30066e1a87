// Note [Preemption] (train/preemption.h).
#include "train/preemption.h"

#include <signal.h>

#include <atomic>
#include <utility>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace kiln::train {
namespace {

std::atomic<int> g_received{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");

struct sigaction g_previous_term, g_previous_int;
bool g_installed = false;

// Async-signal-safe: an atomic store, or (second signal) signal() and raise().
extern "C" void on_stop_signal(int sig) {
  if (g_received.load() != 0) {
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_received.store(sig);
}

}  // namespace

StopSignals::StopSignals() {
  KILN_CHECK(!g_installed, "StopSignals: already installed (train() does not nest)");
  if (const char* hook = std::getenv("KILN_TEST_SIGNAL_AT"); hook && *hook) {
    const std::string s = hook;
    const size_t colon = s.find(':');
    try {
      test_step_ = std::stoll(s.substr(0, colon));
      if (colon != std::string::npos) test_rank_ = std::stoi(s.substr(colon + 1));
    } catch (const std::exception&) {
      fail("KILN_TEST_SIGNAL_AT must be STEP or STEP:RANK, got '", s, "'");
    }
  }
  g_received.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  // A signal the process was started ignoring (SIGINT of a background job, nohup) stays ignored.
  for (auto [sig, previous] : {std::pair{SIGTERM, &g_previous_term}, std::pair{SIGINT, &g_previous_int}}) {
    ::sigaction(sig, nullptr, previous);
    if (previous->sa_handler != SIG_IGN) ::sigaction(sig, &sa, nullptr);
  }
  g_installed = true;
}

StopSignals::~StopSignals() {
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  g_installed = false;
}

int StopSignals::received() const { return g_received.load(); }

void StopSignals::test_hook(int64_t step, int rank) const {
  if (step == test_step_ && (test_rank_ < 0 || rank == test_rank_)) ::raise(SIGTERM);
}

std::string signal_name(int sig) {
  if (sig == SIGTERM) return "SIGTERM";
  if (sig == SIGINT) return "SIGINT";
  return "signal " + std::to_string(sig);
}

}  // namespace kiln::train
