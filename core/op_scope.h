// OpScope: how every public op reports itself to the observers of kiln ops,
// the profiler (core/profiler.h) and the ONNX tracer (export/tracer.h).
//
// Note [Op observers]
// ~~~~~~~~~~~~~~~~~~~
// Each public op in ops/ opens an OpScope first thing, naming itself and its
// tensor arguments, reports its attributes, and hands its results through
// scope.out() as it returns:
//
//   Tensor softmax(const Tensor& x, int64_t dim) {
//     OpScope scope("softmax", x);
//     scope.attr("dim", dim);
//     ...
//     return scope.out(result);
//   }
//
// Two observers exist. The profiler is process-wide (every thread); the op
// tracer is per thread (the thread running the traced forward). When neither
// is on, the constructor is one relaxed atomic load and one thread-local read
// and nothing is copied: inputs, attributes and outputs are only captured
// when someone observes (attr() takes its value by reference and converts it
// only then). Ops nest (linear calls matmul, a fused op may call its
// composition): `depth` counts the ops enclosing this one on its thread, so
// the tracer keeps depth 0 (the ops user code called) and the profiler shows
// the nesting. An op that throws reports to the profiler (its span ends) but
// not to the tracer.
//
// The names are the public function names of ops/ops.h (the op registry's
// names, ops/op_registry.h, except where one registry entry covers several
// functions, as "compare" covers eq..ge).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

using OpAttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>>;
struct OpAttr {
  const char* name;
  OpAttrValue value;
};

// What one op call did: the tracer's node, the profiler's span arguments.
struct OpRecord {
  const char* name = nullptr;
  std::vector<Tensor> inputs;   // tensor arguments in order (undefined where an optional one is absent)
  std::vector<Tensor> outputs;  // the results (empty if the op threw)
  std::vector<OpAttr> attrs;    // non-tensor arguments that change the result
  int depth = 0;                // ops enclosing this one on this thread
  // The attribute named `name`, or nullptr.
  const OpAttrValue* attr(std::string_view name) const;
};

// Per-thread observer of finished ops (the ONNX tracer).
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void op_finished(const OpRecord& record) = 0;
};
// Installs `observer` for ops run on this thread (nullptr: none); returns the
// previous one.
OpObserver* set_thread_op_observer(OpObserver* observer);

namespace detail {
extern std::atomic<bool> g_profiler_active;  // core/profiler.cpp
extern thread_local OpObserver* tls_op_observer;
inline bool observing() {
  return g_profiler_active.load(std::memory_order_relaxed) || tls_op_observer != nullptr;
}
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
inline void append_input(std::vector<Tensor>& v, const Tensor& t) { v.push_back(t); }
inline void append_input(std::vector<Tensor>& v, const std::vector<Tensor>& ts) {
  v.insert(v.end(), ts.begin(), ts.end());
}
}  // namespace detail

class OpScope {
 public:
  // inputs: Tensors and std::vector<Tensor>s (cat's list), in argument order.
  template <class... Ts>
  explicit OpScope(const char* name, const Ts&... inputs) {
    if (detail::observing()) [[unlikely]] {
      std::vector<Tensor> in;
      in.reserve(sizeof...(Ts));
      (detail::append_input(in, inputs), ...);
      begin(name, std::move(in));
    }
  }
  ~OpScope() {
    if (rec_) [[unlikely]] end();
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

  bool on() const { return rec_ != nullptr; }
  // Records a non-tensor argument (int64_t-convertible, double, string, Shape).
  template <class T>
  OpScope& attr(const char* name, const T& value) {
    if (rec_) [[unlikely]] add_attr(name, value);
    return *this;
  }
  // Records the result(s) and passes them through.
  const Tensor& out(const Tensor& t) {
    if (rec_) [[unlikely]] rec_->outputs.push_back(t);
    return t;
  }
  // sort/topk/max's (values, indices) pair (ops/ops.h's ValuesIndices).
  template <class VI>
    requires requires(const VI& vi) { vi.values; vi.indices; }
  const VI& out(const VI& vi) {
    if (rec_) [[unlikely]] rec_->outputs.insert(rec_->outputs.end(), {vi.values, vi.indices});
    return vi;
  }
  const std::vector<Tensor>& out(const std::vector<Tensor>& ts) {
    if (rec_) [[unlikely]] rec_->outputs.insert(rec_->outputs.end(), ts.begin(), ts.end());
    return ts;
  }

 private:
  void begin(const char* name, std::vector<Tensor> inputs);
  void end();
  void push_attr(const char* name, OpAttrValue v);
  template <class T>
  void add_attr(const char* name, const T& v) {
    if constexpr (detail::is_optional<T>::value) {
      if (v.has_value()) add_attr(name, *v);  // an absent optional records nothing
    } else if constexpr (std::is_same_v<T, bool> || std::is_integral_v<T> || std::is_enum_v<T>) {
      push_attr(name, OpAttrValue(static_cast<int64_t>(v)));  // DType: its enum value
    } else if constexpr (std::is_floating_point_v<T>) {
      push_attr(name, OpAttrValue(static_cast<double>(v)));
    } else {
      push_attr(name, OpAttrValue(v));  // std::string, const char*, Shape
    }
  }

  OpRecord* rec_ = nullptr;  // owned; non-null only while observed
  uint64_t profile_token_ = 0;
  bool profiling_ = false;
  int uncaught_ = 0;
};

}  // namespace kiln
