// The op tracer: an OpObserver (core/op_scope.h) that records the ops user
// code calls (depth 0) into a small graph of values and nodes, and the
// dynamic-axis analysis over several traces (Note [Dynamic axes]).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/op_scope.h"
#include "export/onnx.h"

namespace kiln::onnx_export {

enum class ValueKind { Input, Parameter, Constant, Computed };

struct Value {
  ValueKind kind = ValueKind::Computed;
  std::string name;  // inputs and parameters; others are named by the writer
  Shape shape;
  DType dtype = DType::Float32;
  Tensor data;       // parameters and constants: the contents (constants: a private copy)
  int producer = -1; // Computed: the node that made it
};

struct Node {
  std::string op;
  std::vector<int> inputs;  // value ids; -1 where an optional tensor was absent
  std::vector<int> outputs;
  std::vector<OpAttr> attrs;
};

struct Graph {
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> inputs, outputs;  // value ids, in the spec's order
};

// Records one forward pass. Install with set_thread_op_observer (TraceScope
// below); values are identified by their TensorImpl, and the tracer keeps
// every tensor it saw alive so an address cannot be reused within a trace.
class Tracer final : public OpObserver {
 public:
  // params: name -> tensor, for naming parameters and buffers.
  explicit Tracer(const std::vector<std::pair<std::string, Tensor>>& params);
  void add_input(const std::string& name, const Tensor& t);
  void op_finished(const OpRecord& record) override;
  // Marks a result of the forward pass as graph output `name`; kiln::Error
  // if no traced op made it and it is not an input.
  void add_output(const Tensor& t, const std::string& name);
  Graph take() { return std::move(g_); }

 private:
  int value_of(const Tensor& t);
  int add_value(Value v, const Tensor& key);
  Graph g_;
  std::unordered_map<const TensorImpl*, int> ids_;
  std::unordered_map<const TensorImpl*, std::string> param_names_;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<Tensor> keep_alive_;
};

// Installs a tracer on this thread for its lifetime (restores the previous observer).
class TraceScope {
 public:
  explicit TraceScope(OpObserver* o) : prev_(set_thread_op_observer(o)) {}
  ~TraceScope() { set_thread_op_observer(prev_); }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  OpObserver* prev_;
};

// A size that depends on the dynamic axes: c * prod(axis_k ^ exps[k]) + d
// (exps all zero: the constant d).
struct DimExpr {
  int64_t c = 0, d = 0;
  std::vector<int> exps;
  bool is_static() const;
  int64_t value(const std::vector<int64_t>& axis_sizes) const;
};

// Per-trace axis sizes (Note [Dynamic axes]): axis_sizes(t)[k] is axis k's size in trace t.
std::vector<AxisSizes> trace_sizes(const std::vector<std::string>& axis_names);

// Solves values v[t] (one per trace) against the axes' sizes sizes[t][k]
// into `out`; false when no small expression fits.
bool solve_dim(const std::vector<int64_t>& v, const std::vector<std::vector<int64_t>>& sizes, DimExpr& out);

// Traces spec.forward once per entry of trace_sizes and merges the graphs: the
// first graph, with every int attribute, shape and attribute element that
// differs between the traces solved as a DimExpr. kiln::Error when the
// traces differ in structure or a value cannot be solved.
struct TracedModel {
  Graph graph;                         // the first trace
  std::vector<std::string> axes;       // dynamic axis names, in first-seen order
  std::vector<std::vector<int64_t>> sizes;  // sizes[t][k]
  // Dynamic parts: (node, attr name) -> per-element expressions (a scalar attr has one).
  std::map<std::pair<int, std::string>, std::vector<DimExpr>> dyn_attrs;
  std::map<int, std::vector<DimExpr>> dyn_shapes;  // value id -> its shape's expressions
  std::map<int, std::string> unsolved_shapes;      // value id -> why no expression fits its shape
  // Where each axis can be read in the graph: (input value id, dimension).
  std::vector<std::pair<int, int64_t>> axis_source;
};
TracedModel trace_model(const ExportSpec& spec);

}  // namespace kiln::onnx_export
