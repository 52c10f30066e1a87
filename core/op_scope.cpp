// OpScope's observed path (Note [Op observers], core/op_scope.h).
#include "core/op_scope.h"

#include <exception>

#include "core/profiler.h"

namespace kiln {
namespace detail {
thread_local OpObserver* tls_op_observer = nullptr;
namespace {
thread_local int tls_op_depth = 0;
}  // namespace
}  // namespace detail

const OpAttrValue* OpRecord::attr(std::string_view n) const {
  for (const OpAttr& a : attrs)
    if (n == a.name) return &a.value;
  return nullptr;
}

OpObserver* set_thread_op_observer(OpObserver* observer) {
  OpObserver* prev = detail::tls_op_observer;
  detail::tls_op_observer = observer;
  return prev;
}

void OpScope::begin(const char* name, std::vector<Tensor> inputs) {
  rec_ = new OpRecord;
  rec_->name = name;
  rec_->inputs = std::move(inputs);
  rec_->depth = detail::tls_op_depth++;
  uncaught_ = std::uncaught_exceptions();
  if (detail::g_profiler_active.load(std::memory_order_relaxed)) {
    profiling_ = true;
    profile_token_ = profiler::detail::op_begin(*rec_);
  }
}

void OpScope::push_attr(const char* name, OpAttrValue v) { rec_->attrs.push_back(OpAttr{name, std::move(v)}); }

void OpScope::end() {
  --detail::tls_op_depth;
  const bool threw = std::uncaught_exceptions() > uncaught_;
  if (threw) rec_->outputs.clear();
  if (profiling_) profiler::detail::op_end(*rec_, profile_token_);
  // Note [Op observers]: an op that threw is not part of a traced graph.
  if (!threw && detail::tls_op_observer) detail::tls_op_observer->op_finished(*rec_);
  delete rec_;
  rec_ = nullptr;
}

}  // namespace kiln
