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

}  // namespace kiln
