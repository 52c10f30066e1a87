// The traced graph as an ONNX ModelProto (libonnx-dev's generated classes),
// checked with the ONNX checker and written, with external data when large.
#include <onnx/checker.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "export/onnx_writer.h"
#include "ops/ops.h"

namespace kiln::onnx_export {

namespace fs = std::filesystem;

onnx::TensorProto_DataType onnx_dtype(DType d) {
  switch (d) {
    case DType::Float32: return onnx::TensorProto::FLOAT;
    case DType::Float64: return onnx::TensorProto::DOUBLE;
    case DType::Float16: return onnx::TensorProto::FLOAT16;
    case DType::BFloat16: return onnx::TensorProto::BFLOAT16;
    case DType::Int32: return onnx::TensorProto::INT32;
    case DType::Int64: return onnx::TensorProto::INT64;
    case DType::Bool: return onnx::TensorProto::BOOL;
  }
  fail("ONNX export: unknown dtype");
}

// ---- NodeContext ---------------------------------------------------------------

const Node& NodeContext::node() const { return w_.model().graph.nodes[static_cast<size_t>(node_)]; }
int NodeContext::opset() const { return w_.opset(); }

std::string NodeContext::in(size_t i) {
  KILN_CHECK(has_input(i), "ONNX export: op '", op(), "' input ", i, " is absent");
  return w_.value_name(node().inputs[i]);
}
const Shape& NodeContext::in_shape(size_t i) const {
  return w_.model().graph.values[static_cast<size_t>(node().inputs.at(i))].shape;
}
DType NodeContext::in_dtype(size_t i) const {
  return w_.model().graph.values[static_cast<size_t>(node().inputs.at(i))].dtype;
}
std::string NodeContext::out(size_t i) const { return w_.value_name(node().outputs.at(i)); }
const Shape& NodeContext::out_shape(size_t i) const {
  return w_.model().graph.values[static_cast<size_t>(node().outputs.at(i))].shape;
}
DType NodeContext::out_dtype(size_t i) const {
  return w_.model().graph.values[static_cast<size_t>(node().outputs.at(i))].dtype;
}

void NodeContext::check_shape_known(int id) const {
  const auto& unsolved = w_.model().unsolved_shapes;
  if (auto it = unsolved.find(id); it != unsolved.end()) fail(it->second, ", which op '", op(), "' needs");
}

std::string NodeContext::out_shape_tensor(size_t i) {
  const int id = node().outputs.at(i);
  check_shape_known(id);
  const auto& dyn = w_.model().dyn_shapes;
  if (auto it = dyn.find(id); it != dyn.end()) return w_.dims_tensor(it->second);
  return const_ints(out_shape(i));
}

std::string NodeContext::out_dim_tensor(size_t i, int64_t d) {
  const int id = node().outputs.at(i);
  check_shape_known(id);
  const auto& dyn = w_.model().dyn_shapes;
  if (auto it = dyn.find(id); it != dyn.end()) return w_.dim_tensor(it->second.at(static_cast<size_t>(d)));
  return const_ints({out_shape(i).at(static_cast<size_t>(d))});
}

std::vector<OpAttr>::const_iterator NodeContext::find(const char* name) const {
  return std::find_if(node().attrs.begin(), node().attrs.end(),
                      [&](const OpAttr& a) { return std::string_view(a.name) == name; });
}
const OpAttrValue& NodeContext::attr(const char* name) const {
  const auto it = find(name);
  if (it == node().attrs.end())
    refuse(std::string("the op recorded no attribute '") + name + "', which its exporter needs");
  return it->value;
}
bool NodeContext::is_dynamic(const char* name) const { return w_.model().dyn_attrs.count({node_, name}) > 0; }
void NodeContext::check_static(const char* name) const {
  if (is_dynamic(name))
    refuse(std::string("attribute '") + name + "' changes with the input sizes, which this exporter cannot express");
}
int64_t NodeContext::i(const char* name) const {
  check_static(name);
  const OpAttrValue& v = attr(name);
  if (!std::holds_alternative<int64_t>(v)) refuse(std::string("attribute '") + name + "' is not an integer");
  return std::get<int64_t>(v);
}
double NodeContext::f(const char* name) const {
  check_static(name);
  const OpAttrValue& v = attr(name);
  if (std::holds_alternative<int64_t>(v)) return static_cast<double>(std::get<int64_t>(v));
  if (!std::holds_alternative<double>(v)) refuse(std::string("attribute '") + name + "' is not a number");
  return std::get<double>(v);
}
std::string NodeContext::s(const char* name) const {
  const OpAttrValue& v = attr(name);
  if (!std::holds_alternative<std::string>(v)) refuse(std::string("attribute '") + name + "' is not a string");
  return std::get<std::string>(v);
}
std::vector<int64_t> NodeContext::ints(const char* name) const {
  check_static(name);
  const OpAttrValue& v = attr(name);
  if (!std::holds_alternative<std::vector<int64_t>>(v)) refuse(std::string("attribute '") + name + "' is not a list");
  return std::get<std::vector<int64_t>>(v);
}
std::string NodeContext::int_tensor(const char* name) {
  const auto& dyn = w_.model().dyn_attrs;
  if (auto it = dyn.find({node_, name}); it != dyn.end()) return w_.dim_tensor(it->second.at(0));
  const OpAttrValue& v = attr(name);
  if (std::holds_alternative<double>(v)) return const_ints({static_cast<int64_t>(std::get<double>(v))});
  return const_ints({i(name)});
}
std::string NodeContext::ints_tensor(const char* name) {
  const auto& dyn = w_.model().dyn_attrs;
  if (auto it = dyn.find({node_, name}); it != dyn.end()) return w_.dims_tensor(it->second);
  return const_ints(ints(name));
}

std::vector<std::string> NodeContext::emit(const std::string& op_type, const std::vector<std::string>& inputs,
                                           const std::vector<std::string>& outputs, const OnnxAttrs& attrs) {
  onnx::NodeProto* n = w_.add_node();
  n->set_op_type(op_type);
  n->set_name(op() + "_" + std::to_string(node_) + "_" + op_type + "_" + std::to_string(w_.model().graph.nodes.size()) +
              "_" + fresh());
  for (const std::string& s : inputs) n->add_input(s);
  for (const std::string& s : outputs) n->add_output(s);
  for (const auto& [name, v] : attrs) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    if (std::holds_alternative<int64_t>(v)) {
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(std::get<int64_t>(v));
    } else if (std::holds_alternative<double>(v)) {
      a->set_type(onnx::AttributeProto::FLOAT);
      a->set_f(static_cast<float>(std::get<double>(v)));
    } else if (std::holds_alternative<std::string>(v)) {
      a->set_type(onnx::AttributeProto::STRING);
      a->set_s(std::get<std::string>(v));
    } else {
      a->set_type(onnx::AttributeProto::INTS);
      for (int64_t x : std::get<std::vector<int64_t>>(v)) a->add_ints(x);
    }
  }
  return outputs;
}
std::string NodeContext::emit1(const std::string& op_type, const std::vector<std::string>& inputs,
                               const OnnxAttrs& attrs) {
  return emit(op_type, inputs, {fresh()}, attrs)[0];
}
void NodeContext::emit_out(size_t i, const std::string& op_type, const std::vector<std::string>& inputs,
                           const OnnxAttrs& attrs) {
  emit(op_type, inputs, {out(i)}, attrs);
}
std::string NodeContext::fresh() { return w_.fresh(); }
std::string NodeContext::const_ints(const std::vector<int64_t>& v) {
  return w_.add_initializer(fresh(), tensor_from(v, {static_cast<int64_t>(v.size())}));
}
std::string NodeContext::const_scalar(double v, DType dtype) {
  return w_.add_initializer(fresh(), full({}, v, TensorOptions(dtype)));
}
std::string NodeContext::cast(const std::string& x, DType from, DType to) {
  if (from == to) return x;
  return emit1("Cast", {x}, {{"to", int64_t{onnx_dtype(to)}}});
}
void NodeContext::refuse(const std::string& why) const {
  fail("ONNX export: op '", op(), "' (node ", node_, "): ", why);
}

// ---- OnnxWriter ----------------------------------------------------------------

OnnxWriter::OnnxWriter(const TracedModel& m, const ExportSpec& spec, int opset) : m_(m), spec_(spec), opset_(opset) {}

std::string OnnxWriter::add_initializer(const std::string& name, const Tensor& data) {
  const Tensor c = data.detach().contiguous().cpu();
  onnx::TensorProto* t = graph_->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx_dtype(c.dtype()));
  for (int64_t d : c.sizes()) t->add_dims(d);
  // ONNX raw_data is little-endian, as the CPU's; bool is one byte, as kiln's.
  t->set_raw_data(std::string(static_cast<const char*>(c.raw_data()), static_cast<size_t>(c.numel()) * c.element_size()));
  return name;
}

std::string OnnxWriter::value_name(int id) {
  if (auto it = names_.find(id); it != names_.end()) return it->second;
  const Value& v = m_.graph.values[static_cast<size_t>(id)];
  std::string name;
  switch (v.kind) {
    case ValueKind::Input: name = v.name; break;
    case ValueKind::Parameter: name = add_initializer(v.name, v.data); break;
    case ValueKind::Constant: name = add_initializer(kiln::detail::str_cat("const_", id), v.data); break;
    case ValueKind::Computed: name = kiln::detail::str_cat("v", id); break;
  }
  names_[id] = name;
  return name;
}

std::string OnnxWriter::axis_tensor(size_t k) {
  const std::string key = "axis:" + std::to_string(k);
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  const auto [input, dim] = m_.axis_source.at(k);
  const std::string shape = fresh(), idx = add_initializer(fresh(), tensor_from({dim}, {1})), out = "axis_" + m_.axes[k];
  auto node = [&](const char* op, std::vector<std::string> in, const std::string& o) {
    onnx::NodeProto* n = add_node();
    n->set_op_type(op);
    n->set_name(o + "_" + op);
    for (auto& s : in) n->add_input(s);
    n->add_output(o);
  };
  node("Shape", {value_name(input)}, shape);
  node("Gather", {shape, idx}, out);
  return memo_[key] = out;
}

std::string OnnxWriter::dim_tensor(const DimExpr& e) {
  std::string key = kiln::detail::str_cat("dim:", e.c, ":", e.d);
  for (int x : e.exps) key += kiln::detail::str_cat(":", x);
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  auto binary = [&](const char* op, const std::string& a, const std::string& b) {
    onnx::NodeProto* n = add_node();
    const std::string o = fresh();
    n->set_op_type(op);
    n->set_name(o + "_" + op);
    n->add_input(a);
    n->add_input(b);
    n->add_output(o);
    return o;
  };
  std::string r;
  if (e.is_static()) {
    r = add_initializer(fresh(), tensor_from({e.d}, {1}));
  } else {
    for (size_t k = 0; k < e.exps.size(); ++k)
      for (int p = 0; p < e.exps[k]; ++p) r = r.empty() ? axis_tensor(k) : binary("Mul", r, axis_tensor(k));
    if (e.c != 1) r = binary("Mul", r, add_initializer(fresh(), tensor_from({e.c}, {1})));
    if (e.d != 0) r = binary("Add", r, add_initializer(fresh(), tensor_from({e.d}, {1})));
  }
  return memo_[key] = r;
}

std::string OnnxWriter::dims_tensor(const std::vector<DimExpr>& dims) {
  bool all_static = true;
  std::vector<int64_t> fixed;
  for (const DimExpr& e : dims) {
    all_static = all_static && e.is_static();
    fixed.push_back(e.d);
  }
  if (all_static) return add_initializer(fresh(), tensor_from(fixed, {static_cast<int64_t>(fixed.size())}));
  std::vector<std::string> parts;  // first: ONNX wants the nodes in topological order
  for (const DimExpr& e : dims) parts.push_back(dim_tensor(e));
  onnx::NodeProto* n = add_node();
  const std::string o = fresh();
  n->set_op_type("Concat");
  n->set_name(o + "_Concat");
  for (const std::string& p : parts) n->add_input(p);
  n->add_output(o);
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(0);
  return o;
}

namespace {
// The axis name of a dimension, or "" for a fixed size ("batch*sequence" for products).
std::string dim_param(const DimExpr& e, const std::vector<std::string>& axes) {
  std::string s;
  for (size_t k = 0; k < e.exps.size(); ++k)
    for (int p = 0; p < e.exps[k]; ++p) s += kiln::detail::str_cat(s.empty() ? "" : "*", axes[k]);
  if (e.c != 1) s = kiln::detail::str_cat(e.c, "*", s);
  if (e.d != 0) s += kiln::detail::str_cat(e.d > 0 ? "+" : "", e.d);
  return s;
}
}  // namespace

onnx::ModelProto OnnxWriter::build() {
  model_.set_ir_version(8);  // ONNX 1.10+ (what opsets 14-17 pair with; ORT reads it)
  model_.set_producer_name("kiln");
  model_.set_producer_version("0.1.0");
  onnx::OperatorSetIdProto* os = model_.add_opset_import();
  os->set_domain("");
  os->set_version(opset_);
  graph_ = model_.mutable_graph();
  graph_->set_name("kiln");
  const Graph& g = m_.graph;
  auto type_of = [&](int id, onnx::ValueInfoProto* vi) {
    const Value& v = g.values[static_cast<size_t>(id)];
    onnx::TypeProto_Tensor* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx_dtype(v.dtype));
    onnx::TensorShapeProto* sh = tt->mutable_shape();
    const auto dyn = m_.dyn_shapes.find(id);
    const bool unknown = m_.unsolved_shapes.count(id) > 0;  // varies, but not as an expression: left unnamed
    for (size_t d = 0; d < v.shape.size(); ++d) {
      onnx::TensorShapeProto_Dimension* dim = sh->add_dim();
      if (unknown) continue;
      if (dyn != m_.dyn_shapes.end() && !dyn->second[d].is_static())
        dim->set_dim_param(dim_param(dyn->second[d], m_.axes));
      else
        dim->set_dim_value(v.shape[d]);
    }
  };
  for (int id : g.inputs) {
    onnx::ValueInfoProto* vi = graph_->add_input();
    vi->set_name(value_name(id));
    type_of(id, vi);
  }
  // Outputs made by a node take the output's name directly.
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const int id = g.outputs[i];
    if (g.values[static_cast<size_t>(id)].kind == ValueKind::Computed && !names_.count(id)) names_[id] = spec_.outputs[i];
  }
  const auto& table = onnx_op_table();
  const std::map<std::string, std::string> refused = unexportable_ops();
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    const auto it = table.find(node.op);
    if (it == table.end()) {
      const auto why = refused.find(node.op);
      KILN_CHECK(why == refused.end(), "ONNX export: op '", node.op, "' cannot be exported: ", why->second);
      fail("ONNX export: op '", node.op, "' has no ONNX exporter (add one to export/onnx_ops.cpp)");
    }
    NodeContext ctx(*this, static_cast<int>(n));
    it->second(ctx);
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const int id = g.outputs[i];
    std::string name = value_name(id);
    if (name != spec_.outputs[i]) {  // an input, weight or repeated output: an Identity names it
      onnx::NodeProto* n = add_node();
      n->set_op_type("Identity");
      n->set_name(spec_.outputs[i] + "_Identity");
      n->add_input(name);
      n->add_output(spec_.outputs[i]);
    }
    onnx::ValueInfoProto* vi = graph_->add_output();
    vi->set_name(spec_.outputs[i]);
    type_of(id, vi);
  }
  return std::move(model_);
}

// ---- export_onnx ----------------------------------------------------------------

namespace {

// Moves every initializer of at least 1 KiB into `data_path` (ONNX external
// data: location relative to the model file, offset, length), 4 KiB aligned
// so a runtime may map it.
void write_external(onnx::ModelProto& model, const fs::path& data_path) {
  std::ofstream f(data_path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(f.good(), "ONNX export: cannot write ", data_path.string());
  int64_t offset = 0;
  for (onnx::TensorProto& t : *model.mutable_graph()->mutable_initializer()) {
    if (t.raw_data().size() < 1024) continue;
    const int64_t pad = (4096 - offset % 4096) % 4096;
    f.write(std::string(static_cast<size_t>(pad), '\0').data(), pad);
    offset += pad;
    const std::string& raw = t.raw_data();
    f.write(raw.data(), static_cast<std::streamsize>(raw.size()));
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&](const char* k, const std::string& v) {
      onnx::StringStringEntryProto* e = t.add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    add("location", data_path.filename().string());
    add("offset", std::to_string(offset));
    add("length", std::to_string(raw.size()));
    offset += static_cast<int64_t>(raw.size());
    t.clear_raw_data();
  }
  f.close();
  KILN_CHECK(f.good(), "ONNX export: writing ", data_path.string(), " failed");
}

}  // namespace

ExportReport export_onnx(const ExportSpec& spec, const std::string& path, const ExportOptions& options) {
  KILN_CHECK(options.opset >= kMinOpset && options.opset <= kMaxOpset, "ONNX export: opset ", options.opset,
             " is not supported (kiln writes opsets ", kMinOpset, " to ", kMaxOpset, ")");
  const TracedModel traced = trace_model(spec);
  OnnxWriter writer(traced, spec, options.opset);
  onnx::ModelProto model = writer.build();
  ExportReport report;
  report.nodes = model.graph().node_size();
  report.initializers = model.graph().initializer_size();
  for (const onnx::TensorProto& t : model.graph().initializer())
    report.initializer_bytes += static_cast<int64_t>(t.raw_data().size());
  report.external_data = options.force_external_data || report.initializer_bytes > options.external_data_threshold;
  const fs::path out(path), data = fs::path(path + ".data");
  if (report.external_data) {
    write_external(model, data);
  } else {
    std::error_code ec;
    fs::remove(data, ec);  // a stale side file from an earlier export would mislead
  }
  // Written beside `path` and checked there (the checker finds the external
  // data relative to the model), then renamed over it: a failed export
  // leaves an existing file as it was.
  const std::string partial = path + ".partial";
  {
    std::ofstream f(partial, std::ios::binary | std::ios::trunc);
    KILN_CHECK(f.good(), "ONNX export: cannot write ", partial);
    const bool ok = model.SerializeToOstream(&f);
    f.close();
    if (!ok || !f.good()) {
      std::error_code ec;
      fs::remove(partial, ec);
      fail("ONNX export: writing ", partial, " failed (a model over 2 GiB without external data?)");
    }
  }
  try {
    onnx::checker::check_model(partial);
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove(partial, ec);
    fail("ONNX export: the ONNX checker rejects the exported model: ", e.what());
  }
  fs::rename(partial, out);
  return report;
}

std::vector<std::string> exportable_ops() {
  std::vector<std::string> out;
  for (const auto& [name, fn] : onnx_op_table()) out.push_back(name);
  return out;
}

}  // namespace kiln::onnx_export
