// ONNX export of a traced forward pass (libkiln_onnx; docs/onnx.md).
//
// A forward pass is run under a tracer (export/tracer.h) that records every op
// user code calls into a small graph; export/onnx_ops.cpp turns each recorded
// op into ONNX nodes; the weights become initializers. Sizes that depend on
// the input (batch, sequence) are found by tracing three times at different
// sizes (Note [Dynamic axes] in export/tracer.cpp), so the exported model takes
// any batch and sequence length.
//
//   onnx_export::ExportSpec spec;
//   spec.module = model.get();  // names the initializers after its parameters
//   spec.inputs = {{"x", {{0, "batch"}}}};
//   spec.outputs = {"y"};
//   spec.example_inputs = [](const onnx_export::AxisSizes& s) { return std::vector{randn({s.at("batch"), 8})}; };
//   spec.forward = [&](const std::vector<Tensor>& in) { return std::vector{model->forward(in[0])}; };
//   onnx_export::export_onnx(spec, "model.onnx");
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::nn {
class Module;
}

namespace kiln::onnx_export {

// Size of each named dynamic axis in one trace ("batch" -> 3).
using AxisSizes = std::map<std::string, int64_t>;

struct InputSpec {
  std::string name;
  std::map<int64_t, std::string> dynamic_axes;  // dimension -> axis name; other dimensions are fixed
};

struct ExportSpec {
  std::vector<InputSpec> inputs;
  std::vector<std::string> outputs;  // names of forward's results, in order
  // Inputs for one trace at the given axis sizes (one tensor per `inputs`
  // entry, on the CPU). Values matter: ids must be valid token ids, masks
  // should have both zeros and ones where the model treats them differently.
  std::function<std::vector<Tensor>(const AxisSizes&)> example_inputs;
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> forward;
  // Names parameters and buffers (initializers "bert.encoder.layer.0...");
  // null: they are named param_0, param_1, ... Put it in eval() mode first.
  const nn::Module* module = nullptr;
};

inline constexpr int kMinOpset = 14;      // Trilu, Reshape's allowzero
inline constexpr int kMaxOpset = 17;      // LayerNormalization; what Debian's onnx 1.12 checker knows
inline constexpr int kDefaultOpset = 17;

struct ExportOptions {
  int opset = kDefaultOpset;
  // Weights go to <path>.data (ONNX external data) when their bytes exceed
  // this (protobuf cannot serialize a message over 2 GiB), or always when
  // force_external_data.
  int64_t external_data_threshold = int64_t{2} << 30;
  bool force_external_data = false;
};

struct ExportReport {
  int64_t nodes = 0;             // ONNX nodes written
  int64_t initializers = 0;      // weights and constants
  int64_t initializer_bytes = 0;
  bool external_data = false;    // weights in <path>.data
};

// Traces spec.forward, converts it, validates it with the ONNX checker and
// writes `path` (and <path>.data for external weights). kiln::Error naming the
// op for an op that has no ONNX form, an attribute that varies with the input
// in a way the exporter cannot express, or traces that differ in structure.
ExportReport export_onnx(const ExportSpec& spec, const std::string& path, const ExportOptions& options = {});

// The op names that have an ONNX exporter, and those that cannot be exported
// with the reason (export/onnx_ops.cpp); every op the registry
// (ops/op_registry.h) lists is in one of them (tests/test_onnx_export.cpp).
std::vector<std::string> exportable_ops();
std::map<std::string, std::string> unexportable_ops();
// Registry names that stand for several traced names ("compare": eq..ge,
// "gelu_tanh": gelu), for the coverage check.
const std::map<std::string, std::vector<std::string>>& registry_aliases();

}  // namespace kiln::onnx_export
