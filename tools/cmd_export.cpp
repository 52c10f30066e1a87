// `kiln export --model DIR --output model.onnx`: the model as ONNX, with
// dynamic batch and sequence axes and the weights as initializers (external
// data beside it for models over 2 GiB); docs/onnx.md.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "core/error.h"
#include "kiln.h"
#include "tools/command.h"
#if KILN_WITH_ONNX
#include "export/bert_export.h"
#endif

namespace kiln::tools {
namespace {

#if KILN_WITH_ONNX

namespace fs = std::filesystem;

struct ExportCommand {
  std::string model, output, task, adapter;
  int opset = onnx_export::kDefaultOpset;
  bool overwrite = false, normalize = false, external_data = false;
};

int run_export(ExportCommand& c) {
  KILN_CHECK(c.opset >= onnx_export::kMinOpset && c.opset <= onnx_export::kMaxOpset, "--opset ", c.opset,
             " is not supported (kiln writes ONNX opsets ", onnx_export::kMinOpset, " to ", onnx_export::kMaxOpset, ")");
  nn::check_model_dir(c.model, true, "--model");
  std::error_code ec;
  KILN_CHECK(c.overwrite || !fs::exists(c.output, ec), "--output ", c.output, " exists; give --overwrite to replace it");
  KILN_CHECK(c.normalize == false || c.task.empty() || c.task == "embed", "--normalize applies to --task embed only");
  std::string task = c.task;
  auto model = onnx_export::load_bert_for_export(c.model, task, c.adapter);
  onnx_export::ExportOptions opts;
  opts.opset = c.opset;
  opts.force_external_data = c.external_data;
  const onnx_export::ExportReport r =
      onnx_export::export_onnx(onnx_export::bert_export_spec(*model, task, c.normalize), c.output, opts);
  char mb[32];
  std::snprintf(mb, sizeof mb, "%.1f MB", static_cast<double>(r.initializer_bytes) / 1e6);
  std::cerr << "exported " << c.model << " (" << task << ") to " << c.output << ": opset " << c.opset << ", "
            << r.nodes << " nodes, " << r.initializers << " initializers (" << mb
            << (r.external_data ? ", in " + c.output + ".data" : std::string()) << ")\n";
  return 0;
}

const Registrar reg_export("export", [](CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "Export a BERT model directory as ONNX (dynamic batch and sequence axes)");
  auto c = std::make_shared<ExportCommand>();
  cmd->add_option("--model", c->model, "model directory (config.json, model.safetensors)")->required();
  cmd->add_option("--adapter", c->adapter, "a LoRA adapter directory applied to --model and merged into its weights");
  cmd->add_option("--output", c->output, "the .onnx file to write; never over an existing file without --overwrite")
      ->required();
  cmd->add_option("--task", c->task, "what the graph outputs (default: the architecture config.json names, else embed)")
      ->check(CLI::IsMember(onnx_export::bert_tasks()));
  cmd->add_option("--opset", c->opset, "ONNX opset to write (14 to 17)")->capture_default_str();
  cmd->add_flag("--overwrite", c->overwrite, "replace an existing --output file");
  cmd->add_flag("--normalize", c->normalize, "embed: L2-normalise sentence_embedding (as kiln embed --normalize)");
  cmd->add_flag("--external-data", c->external_data,
                "write the weights to OUTPUT.data even under 2 GiB (ONNX external data)");
  return [c] { return run_export(*c); };
});

#else  // configured without libonnx-dev (KILN_ONNX=AUTO found none, or OFF)

const Registrar reg_export("export", [](CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "Export a model as ONNX (not in this build: built without ONNX export)");
  cmd->allow_extras();
  return []() -> int {
    throw Error(
        "kiln export: this kiln was built without ONNX export (libonnx-dev was not found when it was configured; "
        "install it and rebuild)");
  };
});

#endif

}  // namespace
}  // namespace kiln::tools
