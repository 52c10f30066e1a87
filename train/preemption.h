// Stopping a training run cleanly on SIGTERM / SIGINT (train/trainer.h).
//
// Note [Preemption]
// Schedulers preempt jobs with SIGTERM (Slurm, Kubernetes; a grace period
// before SIGKILL) and people press Ctrl-C (SIGINT). While train() runs,
// StopSignals installs a handler for both that only records the signal
// number in a lock-free std::atomic (async-signal-safe); the training loop
// reads it after every optimizer step. So the step in progress finishes, the
// evaluation and save due at that step happen as usual, then a checkpoint of
// that step is written (atomic: Note [Atomic checkpoints]), its path printed,
// and train() returns with TrainResult::stop_signal set; the tools exit with
// kPreemptedExitCode. Bound: one step, plus an evaluation when one is due,
// plus one checkpoint write. `--resume` then continues bit for bit (Note
// [Exact resume]): the checkpoint is the one a periodic save would write.
// A second signal while the first is being handled ends the process at once
// with the default action (the handler resets it and re-raises): nothing is
// corrupted, since a checkpoint is either complete or not there. A signal
// during the last step changes nothing: the run finishes as usual (exit 0).
// Under data parallel the ranks agree on stopping: after every step each rank
// contributes the signal it saw (0: none) to an all_reduce(max), so a signal
// delivered to any one rank stops every rank after the same step, and they
// save one checkpoint (rank 0 writes it; a barrier keeps the others until it
// is complete, so mpirun never kills rank 0 mid-write).
// Handlers are installed with SA_RESTART, so the loader threads' blocking
// calls are not interrupted; the previous handlers come back when train()
// returns. A signal the process inherited as ignored (SIGINT in a background
// job of a non-interactive shell, nohup) stays ignored. One that comes before
// train() starts (model loading, corpus preparation) has its default effect;
// during the resume phase, it stops the run after its first step.
//
// Test hook: KILN_TEST_SIGNAL_AT=STEP[:RANK] makes the training loop raise
// SIGTERM in its own process right after step STEP (on rank RANK only, when
// given): deterministic preemption for tests/train_cli.sh and train_dist.sh.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::train {

// The exit status of `kiln pretrain/finetune` stopped by a signal after
// writing its checkpoint: EX_TEMPFAIL of sysexits.h ("try again later").
inline constexpr int kPreemptedExitCode = 75;

// Installs the SIGTERM and SIGINT handlers for its lifetime (not nestable).
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received since construction, 0 when none.
  int received() const;
  // KILN_TEST_SIGNAL_AT: raises SIGTERM when (step, rank) is the one it names.
  void test_hook(int64_t step, int rank) const;

 private:
  int64_t test_step_ = -1;
  int test_rank_ = -1;
};

// "SIGTERM", "SIGINT", else "signal N".
std::string signal_name(int sig);

}  // namespace kiln::train
