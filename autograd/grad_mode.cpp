#include "autograd/grad_mode.h"

namespace kiln {
namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_in_backward = false;
}
bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }
bool in_backward() { return t_in_backward; }
BackwardScope::BackwardScope(bool active) : prev_(t_in_backward) { t_in_backward = active; }
BackwardScope::~BackwardScope() { t_in_backward = prev_; }
}  // namespace kiln
