// Grad mode: whether ops record autograd history on this thread.
#pragma once

namespace kiln {

bool grad_enabled();
void set_grad_enabled(bool enabled);

// Disables recording for its scope (like torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Whether the backward engine is running on this thread. Forward-only
// behaviour checks it: autocast (ops/autocast.h) is off inside backward, so
// backward formulas run in the dtypes their forward chose.
bool in_backward();

// Marks its scope as backward (run_backward uses it; nests). With
// active = false it marks its scope as forward instead: checkpoint()'s
// recomputation (ops/activation_checkpoint.h) runs inside a backward but must
// see forward behaviour (autocast) as the original forward did.
class BackwardScope {
 public:
  explicit BackwardScope(bool active = true);
  ~BackwardScope();
  BackwardScope(const BackwardScope&) = delete;
  BackwardScope& operator=(const BackwardScope&) = delete;

 private:
  bool prev_;
};

}  // namespace kiln
