// Internal to libkiln_onnx: what an op exporter (export/onnx_ops.cpp) sees of
// the ONNX graph being written (export/onnx_export.cpp).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <onnx/onnx_pb.h>

#include "core/error.h"
#include "export/tracer.h"

namespace kiln::onnx_export {

using OnnxAttrs = std::vector<std::pair<std::string, OpAttrValue>>;  // double -> FLOAT

onnx::TensorProto_DataType onnx_dtype(DType d);

class OnnxWriter;

// One traced node being exported. Shapes are the first trace's (ranks and
// fixed sizes); the attribute accessors refuse an attribute that varies with
// the input sizes unless asked for it as a tensor (int_tensor, ints_tensor).
class NodeContext {
 public:
  NodeContext(OnnxWriter& w, int node) : w_(w), node_(node) {}
  const Node& node() const;
  const std::string& op() const { return node().op; }
  int opset() const;

  size_t num_inputs() const { return node().inputs.size(); }
  bool has_input(size_t i) const { return i < num_inputs() && node().inputs[i] >= 0; }
  std::string in(size_t i);  // its ONNX name (an initializer is written on first use)
  const Shape& in_shape(size_t i) const;
  DType in_dtype(size_t i) const;
  int64_t in_rank(size_t i) const { return static_cast<int64_t>(in_shape(i).size()); }

  size_t num_outputs() const { return node().outputs.size(); }
  std::string out(size_t i) const;
  const Shape& out_shape(size_t i) const;
  DType out_dtype(size_t i) const;
  // The output's shape as a 1-D int64 tensor (computed from the input sizes
  // where it is dynamic).
  std::string out_shape_tensor(size_t i);
  // Dimension d of output i as a 1-element 1-D int64 tensor.
  std::string out_dim_tensor(size_t i, int64_t d);

  bool has_attr(const char* name) const { return node().attrs.end() != find(name); }
  bool is_dynamic(const char* name) const;  // the attribute changes with the input sizes
  int64_t i(const char* name) const;  // int, bool, DType
  double f(const char* name) const;
  std::string s(const char* name) const;
  std::vector<int64_t> ints(const char* name) const;
  // A 1-element 1-D int64 tensor of an int attribute, and a 1-D int64 tensor
  // of a list attribute; dynamic ones are computed from the input sizes.
  std::string int_tensor(const char* name);
  std::string ints_tensor(const char* name);

  // Emits one ONNX node; returns its output names (fresh ones where outs is
  // given as a count).
  std::vector<std::string> emit(const std::string& op_type, const std::vector<std::string>& inputs,
                                const std::vector<std::string>& outputs, const OnnxAttrs& attrs = {});
  std::string emit1(const std::string& op_type, const std::vector<std::string>& inputs, const OnnxAttrs& attrs = {});
  // emit1, writing the node's output i.
  void emit_out(size_t i, const std::string& op_type, const std::vector<std::string>& inputs,
                const OnnxAttrs& attrs = {});
  std::string fresh();
  std::string const_ints(const std::vector<int64_t>& v);     // 1-D int64
  std::string const_scalar(double v, DType dtype);            // 0-dim
  std::string cast(const std::string& x, DType from, DType to);  // x itself when from == to

  [[noreturn]] void refuse(const std::string& why) const;

 private:
  std::vector<OpAttr>::const_iterator find(const char* name) const;
  const OpAttrValue& attr(const char* name) const;
  void check_static(const char* name) const;
  void check_shape_known(int value) const;
  OnnxWriter& w_;
  int node_;
};

using OpExporter = void (*)(NodeContext&);
// export/onnx_ops.cpp: THE table, op name -> exporter.
const std::map<std::string, OpExporter>& onnx_op_table();

// Writes a traced model as an ONNX ModelProto (export/onnx_export.cpp).
class OnnxWriter {
 public:
  OnnxWriter(const TracedModel& m, const ExportSpec& spec, int opset);
  onnx::ModelProto build();

  // For NodeContext.
  const TracedModel& model() const { return m_; }
  int opset() const { return opset_; }
  std::string value_name(int id);      // writes the initializer of a parameter or constant on first use
  std::string fresh() { return kiln::detail::str_cat("t", next_tmp_++); }
  onnx::NodeProto* add_node() { return graph_->add_node(); }
  std::string add_initializer(const std::string& name, const Tensor& data);
  std::string dim_tensor(const DimExpr& e);  // 1-element 1-D int64
  std::string dims_tensor(const std::vector<DimExpr>& dims);
  std::string axis_tensor(size_t k);

 private:
  const TracedModel& m_;
  const ExportSpec& spec_;
  int opset_;
  onnx::ModelProto model_;
  onnx::GraphProto* graph_ = nullptr;
  std::map<int, std::string> names_;
  std::map<std::string, std::string> memo_;  // expression key -> tensor name
  int next_tmp_ = 0;
};

}  // namespace kiln::onnx_export
