#include "export/tracer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "nn/module.h"

namespace kiln::onnx_export {

// Note [Dynamic axes]
// ~~~~~~~~~~~~~~~~~~~
// kiln ops record concrete sizes: BERT's mask view records (B, 1, 1, T), its
// position slice ends at T. The graph must take any B and T, so the forward is
// traced three times with the dynamic axes at different sizes (axis k takes
// the primes of kAxisPrimes[k], distinct across axes, none 1, so a size-1
// broadcast never looks like an axis). The traces must match node for node;
// any int attribute element (and any shape dimension) that differs is solved
// as c * prod(axis_k ^ e_k) + d with e_k in {0, 1, 2}, from the first two
// traces and checked on the third; the ONNX writer computes it at run time
// from Shape(input) (export/onnx_export.cpp). A value no such expression fits
// is an error naming the op and attribute, as are traces of different
// structure (a forward whose ops depend on the sizes) and constants whose
// contents change between traces (sizes baked into a tensor() call).

namespace {
constexpr int kTraces = 3;
constexpr int64_t kAxisPrimes[][kTraces] = {{2, 3, 5}, {7, 11, 13}, {17, 19, 23}, {29, 31, 37}};

int64_t ipow(int64_t b, int e) {
  int64_t r = 1;
  while (e-- > 0) r *= b;
  return r;
}

// Contents as bytes (contiguous, CPU), for comparing constants between traces.
std::string bytes_of(const Tensor& t) {
  const Tensor c = t.detach().contiguous().cpu();
  return std::string(static_cast<const char*>(c.raw_data()), static_cast<size_t>(c.numel()) * c.element_size());
}

const char* kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::Input: return "input";
    case ValueKind::Parameter: return "parameter";
    case ValueKind::Constant: return "constant";
    case ValueKind::Computed: return "computed";
  }
  return "?";
}
}  // namespace

bool DimExpr::is_static() const {
  return std::all_of(exps.begin(), exps.end(), [](int e) { return e == 0; });
}

int64_t DimExpr::value(const std::vector<int64_t>& axis_sizes) const {
  int64_t m = 1;
  for (size_t k = 0; k < exps.size(); ++k) m *= ipow(axis_sizes[k], exps[k]);
  return is_static() ? d : c * m + d;
}

std::vector<AxisSizes> trace_sizes(const std::vector<std::string>& axis_names) {
  KILN_CHECK(axis_names.size() <= std::size(kAxisPrimes), "ONNX export: at most ", std::size(kAxisPrimes),
             " distinct dynamic axes, got ", axis_names.size());
  std::vector<AxisSizes> out(kTraces);
  for (int t = 0; t < kTraces; ++t)
    for (size_t k = 0; k < axis_names.size(); ++k) out[static_cast<size_t>(t)][axis_names[k]] = kAxisPrimes[k][t];
  return out;
}

bool solve_dim(const std::vector<int64_t>& v, const std::vector<std::vector<int64_t>>& sizes, DimExpr& out) {
  const size_t K = sizes.empty() ? 0 : sizes[0].size();
  out = DimExpr{0, v[0], std::vector<int>(K, 0)};
  if (std::all_of(v.begin(), v.end(), [&](int64_t x) { return x == v[0]; })) return true;
  // Exponent vectors by total degree, lowest first (a plain axis before its square).
  std::vector<std::vector<int>> cands;
  const int n = static_cast<int>(ipow(3, static_cast<int>(K)));
  for (int code = 1; code < n; ++code) {
    std::vector<int> e(K);
    for (size_t k = 0, c = static_cast<size_t>(code); k < K; ++k, c /= 3) e[k] = static_cast<int>(c % 3);
    cands.push_back(e);
  }
  std::stable_sort(cands.begin(), cands.end(), [](const auto& a, const auto& b) {
    int sa = 0, sb = 0;
    for (int x : a) sa += x;
    for (int x : b) sb += x;
    return sa < sb;
  });
  for (const auto& e : cands) {
    std::vector<int64_t> m(v.size(), 1);
    for (size_t t = 0; t < v.size(); ++t)
      for (size_t k = 0; k < K; ++k) m[t] *= ipow(sizes[t][k], e[k]);
    if (m[1] == m[0] || (v[1] - v[0]) % (m[1] - m[0]) != 0) continue;
    const int64_t c = (v[1] - v[0]) / (m[1] - m[0]);
    const int64_t d = v[0] - c * m[0];
    if (c == 0) continue;
    bool ok = true;
    for (size_t t = 2; t < v.size(); ++t) ok = ok && v[t] == c * m[t] + d;
    if (ok) {
      out = DimExpr{c, d, e};
      return true;
    }
  }
  return false;
}

// ---- Tracer ------------------------------------------------------------------

Tracer::Tracer(const std::vector<std::pair<std::string, Tensor>>& params) : params_(params) {
  for (const auto& [name, t] : params)
    if (t.defined()) param_names_.emplace(t.impl_ptr().get(), name);  // a tied weight keeps its first name
}

int Tracer::add_value(Value v, const Tensor& key) {
  const int id = static_cast<int>(g_.values.size());
  g_.values.push_back(std::move(v));
  ids_[key.impl_ptr().get()] = id;
  keep_alive_.push_back(key);
  return id;
}

void Tracer::add_input(const std::string& name, const Tensor& t) {
  KILN_CHECK(t.defined(), "ONNX export: input '", name, "' is undefined");
  g_.inputs.push_back(add_value(Value{ValueKind::Input, name, t.sizes(), t.dtype(), Tensor(), -1}, t));
}

int Tracer::value_of(const Tensor& t) {
  if (!t.defined()) return -1;
  if (auto it = ids_.find(t.impl_ptr().get()); it != ids_.end()) return it->second;
  // Not made by a traced op: a parameter or buffer (the tensor itself, or a
  // tensor over the same storage with the same layout), else a constant.
  std::string pname;
  if (auto it = param_names_.find(t.impl_ptr().get()); it != param_names_.end()) pname = it->second;
  for (size_t i = 0; pname.empty() && i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    if (p.defined() && p.shares_storage_with(t) && p.sizes() == t.sizes() && p.strides() == t.strides() &&
        p.offset() == t.offset() && p.dtype() == t.dtype())
      pname = params_[i].first;
  }
  if (!pname.empty()) return add_value(Value{ValueKind::Parameter, pname, t.sizes(), t.dtype(), t.detach(), -1}, t);
  // A private copy: the caller may overwrite its tensor after the op ran.
  return add_value(Value{ValueKind::Constant, "", t.sizes(), t.dtype(), t.detach().cpu().clone(), -1}, t);
}

void Tracer::op_finished(const OpRecord& r) {
  if (r.depth != 0) return;  // ops inside ops: their caller is the node
  TraceScope off(nullptr);   // copying a constant runs ops: not part of the trace
  Node n;
  n.op = r.name;
  n.attrs = r.attrs;
  for (const Tensor& t : r.inputs) n.inputs.push_back(value_of(t));
  const int node_id = static_cast<int>(g_.nodes.size());
  for (const Tensor& t : r.outputs) {
    KILN_CHECK(t.defined(), "ONNX export: op '", r.name, "' returned an undefined tensor");
    n.outputs.push_back(add_value(Value{ValueKind::Computed, "", t.sizes(), t.dtype(), Tensor(), node_id}, t));
  }
  g_.nodes.push_back(std::move(n));
}

void Tracer::add_output(const Tensor& t, const std::string& name) {
  KILN_CHECK(t.defined(), "ONNX export: output '", name, "' is undefined");
  const auto it = ids_.find(t.impl_ptr().get());
  KILN_CHECK(it != ids_.end(), "ONNX export: output '", name,
             "' was not made by a traced op, nor is it an input (was it built outside the kiln ops, e.g. with "
             "tensor()?)");
  g_.outputs.push_back(it->second);
}

// ---- several traces -> one graph with dynamic sizes ---------------------------

namespace {

std::string where_node(const Graph& g, int node) {
  return "op '" + g.nodes[static_cast<size_t>(node)].op + "' (node " + std::to_string(node) + " of " +
         std::to_string(g.nodes.size()) + ")";
}

// Why values that vary per trace fit no expression.
std::string unsolvable(const std::vector<int64_t>& v, const TracedModel& m, const std::string& what) {
  std::string seen;
  for (size_t t = 0; t < v.size(); ++t) {
    seen += (t ? ", " : "") + std::to_string(v[t]) + " at";
    for (size_t k = 0; k < m.axes.size(); ++k) seen += " " + m.axes[k] + "=" + std::to_string(m.sizes[t][k]);
  }
  return "ONNX export: " + what + " changes with the input sizes (" + seen +
         ") in a way the exporter cannot express (c * axis products + d)";
}

// Values that vary per trace, one expression each, or an error naming `what`.
DimExpr solve_or_fail(const std::vector<int64_t>& v, const TracedModel& m, const std::string& what) {
  DimExpr e;
  if (!solve_dim(v, m.sizes, e)) fail(unsolvable(v, m, what));
  return e;
}

// Per-dimension expressions; `why` gets the first unsolvable dimension's
// message (an empty `why` and a false return: none).
bool solve_shape(const std::vector<const Shape*>& shapes, const TracedModel& m, const std::string& what,
                 std::vector<DimExpr>& out, bool& dynamic, std::string& why) {
  out.clear();
  dynamic = false;
  for (size_t i = 0; i < shapes[0]->size(); ++i) {
    std::vector<int64_t> v;
    for (const Shape* s : shapes) v.push_back((*s)[i]);
    DimExpr e;
    if (!solve_dim(v, m.sizes, e)) {
      why = unsolvable(v, m, what + " dimension " + std::to_string(i));
      return false;
    }
    out.push_back(e);
    dynamic = dynamic || !e.is_static();
  }
  return true;
}

// Checks trace t against trace 0 and collects the attributes that differ.
void merge(TracedModel& m, const std::vector<Graph>& gs) {
  const Graph& g = gs[0];
  for (size_t t = 1; t < gs.size(); ++t) {
    const Graph& h = gs[t];
    KILN_CHECK(h.nodes.size() == g.nodes.size() && h.values.size() == g.values.size(),
               "ONNX export: the forward pass runs different ops at different input sizes (", g.nodes.size(), " vs ",
               h.nodes.size(), " ops); the traced forward graphs do not match");
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& a = g.nodes[i];
      const Node& b = h.nodes[i];
      KILN_CHECK(a.op == b.op && a.inputs == b.inputs && a.outputs.size() == b.outputs.size() &&
                     a.attrs.size() == b.attrs.size(),
                 "ONNX export: the traced forward graphs do not match at node ", i, ": '", a.op, "' vs '", b.op,
                 "' (the forward pass must run the same ops at every input size)");
      for (size_t j = 0; j < a.attrs.size(); ++j)
        KILN_CHECK(std::string(a.attrs[j].name) == b.attrs[j].name && a.attrs[j].value.index() == b.attrs[j].value.index(),
                   "ONNX export: ", where_node(g, static_cast<int>(i)), " records different attributes between traces");
    }
    for (size_t i = 0; i < g.values.size(); ++i) {
      const Value& a = g.values[i];
      const Value& b = h.values[i];
      KILN_CHECK(a.kind == b.kind && a.dtype == b.dtype && a.shape.size() == b.shape.size() && a.name == b.name,
                 "ONNX export: the traced forward graphs do not match at value ", i, " (a ", kind_name(a.kind),
                 " vs a ", kind_name(b.kind), ")");
      if (a.kind == ValueKind::Constant)
        KILN_CHECK(a.shape == b.shape && bytes_of(a.data) == bytes_of(b.data),
                   "ONNX export: a constant (a tensor no traced op made, of shape ", shape_str(a.shape),
                   ") changes with the input sizes; make it with traced ops (zeros, arange, ...) instead of "
                   "tensor()/tensor_from()");
      if (a.kind == ValueKind::Parameter)
        KILN_CHECK(a.shape == b.shape, "ONNX export: parameter ", a.name, " changes shape between traces");
    }
  }
  // Attributes.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& a = g.nodes[i];
    for (size_t j = 0; j < a.attrs.size(); ++j) {
      const std::string what = where_node(g, static_cast<int>(i)) + " attribute '" + a.attrs[j].name + "'";
      std::vector<DimExpr> exprs;
      bool dynamic = false;
      if (std::holds_alternative<int64_t>(a.attrs[j].value)) {
        std::vector<int64_t> v;
        for (const Graph& h : gs) v.push_back(std::get<int64_t>(h.nodes[i].attrs[j].value));
        exprs.push_back(solve_or_fail(v, m, what));
        dynamic = !exprs.back().is_static();
      } else if (std::holds_alternative<double>(a.attrs[j].value)) {
        // arange's bounds are doubles; a varying one must be a whole number.
        std::vector<int64_t> v;
        bool varies = false, whole = true;
        for (const Graph& h : gs) {
          const double x = std::get<double>(h.nodes[i].attrs[j].value);
          varies = varies || x != std::get<double>(a.attrs[j].value);
          const bool x_whole = std::nearbyint(x) == x && std::abs(x) < 9e15;
          whole = whole && x_whole;
          // Only a whole number is converted (-FLT_MAX, a mask's fill value, is no int64).
          v.push_back(x_whole ? static_cast<int64_t>(x) : 0);
        }
        if (!varies) continue;
        KILN_CHECK(whole, "ONNX export: ", what, " is a fractional number that changes with the input sizes");
        exprs.push_back(solve_or_fail(v, m, what));
        dynamic = true;
      } else if (std::holds_alternative<std::vector<int64_t>>(a.attrs[j].value)) {
        std::vector<Shape> vs;
        for (const Graph& h : gs) vs.push_back(std::get<std::vector<int64_t>>(h.nodes[i].attrs[j].value));
        std::vector<const Shape*> ptrs;
        for (const Shape& s : vs) {
          KILN_CHECK(s.size() == vs[0].size(), "ONNX export: ", what, " changes length with the input sizes");
          ptrs.push_back(&s);
        }
        std::string why;
        if (!solve_shape(ptrs, m, what, exprs, dynamic, why)) fail(why);
      } else {
        for (const Graph& h : gs)
          KILN_CHECK(std::get<std::string>(h.nodes[i].attrs[j].value) == std::get<std::string>(a.attrs[j].value),
                     "ONNX export: ", what, " changes with the input sizes");
      }
      if (dynamic) m.dyn_attrs[{static_cast<int>(i), a.attrs[j].name}] = exprs;
    }
  }
  // Shapes. One no expression fits is an error only where an exporter needs
  // it (a strided slice of a dynamic axis is fine until something reshapes to it).
  for (size_t i = 0; i < g.values.size(); ++i) {
    std::vector<const Shape*> ptrs;
    for (const Graph& h : gs) ptrs.push_back(&h.values[i].shape);
    bool dynamic = false;
    const Value& v = g.values[i];
    const std::string what = v.producer >= 0 ? "the shape of a result of " + where_node(g, v.producer)
                                             : "the shape of input '" + v.name + "'";
    std::vector<DimExpr> e;
    std::string why;
    if (!solve_shape(ptrs, m, what, e, dynamic, why))
      m.unsolved_shapes[static_cast<int>(i)] = why;
    else if (dynamic)
      m.dyn_shapes[static_cast<int>(i)] = std::move(e);
  }
}

}  // namespace

TracedModel trace_model(const ExportSpec& spec) {
  KILN_CHECK(spec.forward && spec.example_inputs, "ONNX export: the spec needs forward and example_inputs");
  KILN_CHECK(!spec.inputs.empty() && !spec.outputs.empty(), "ONNX export: the spec names no inputs or no outputs");
  TracedModel m;
  for (const InputSpec& in : spec.inputs)
    for (const auto& [dim, axis] : in.dynamic_axes)
      if (std::find(m.axes.begin(), m.axes.end(), axis) == m.axes.end()) m.axes.push_back(axis);
  const std::vector<AxisSizes> sizes = trace_sizes(m.axes);
  for (const AxisSizes& s : sizes) {
    m.sizes.emplace_back();
    for (const std::string& a : m.axes) m.sizes.back().push_back(s.at(a));
  }
  std::vector<std::pair<std::string, Tensor>> params;
  if (spec.module) {
    params = spec.module->named_parameters();
    for (auto& b : spec.module->named_buffers()) params.push_back(b);
  }
  std::vector<Graph> graphs;
  for (const AxisSizes& s : sizes) {
    const std::vector<Tensor> inputs = spec.example_inputs(s);
    KILN_CHECK(inputs.size() == spec.inputs.size(), "ONNX export: example_inputs gave ", inputs.size(),
               " tensors for ", spec.inputs.size(), " inputs");
    Tracer tracer(params);
    for (size_t i = 0; i < inputs.size(); ++i) {
      tracer.add_input(spec.inputs[i].name, inputs[i]);
      for (const auto& [dim, axis] : spec.inputs[i].dynamic_axes)
        KILN_CHECK(dim >= 0 && dim < inputs[i].dim() && inputs[i].size(dim) == s.at(axis), "ONNX export: input '",
                   spec.inputs[i].name, "' dimension ", dim, " should be axis '", axis, "' of size ", s.at(axis),
                   ", got shape ", shape_str(inputs[i].sizes()));
    }
    std::vector<Tensor> outputs;
    {
      NoGradGuard no_grad;
      TraceScope scope(&tracer);
      outputs = spec.forward(inputs);
    }
    KILN_CHECK(outputs.size() == spec.outputs.size(), "ONNX export: forward returned ", outputs.size(),
               " tensors for ", spec.outputs.size(), " outputs");
    for (size_t i = 0; i < outputs.size(); ++i) tracer.add_output(outputs[i], spec.outputs[i]);
    graphs.push_back(tracer.take());
  }
  // Each axis is read from the first input that has it.
  for (const std::string& a : m.axes) {
    bool found = false;
    for (size_t i = 0; i < spec.inputs.size() && !found; ++i)
      for (const auto& [dim, axis] : spec.inputs[i].dynamic_axes)
        if (axis == a && !found) {
          m.axis_source.emplace_back(graphs[0].inputs[i], dim);
          found = true;
        }
  }
  merge(m, graphs);
  m.graph = std::move(graphs[0]);
  return m;
}

}  // namespace kiln::onnx_export
