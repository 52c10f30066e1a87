// The installed kiln::onnx component: a two-op model exported through the
// public header alone (tests/package/CMakeLists.txt, part 3).
#include <kiln/export/onnx.h>
#include <kiln/kiln.h>

#include <cstdio>
#include <filesystem>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  using namespace kiln;
  onnx_export::ExportSpec spec;
  spec.inputs = {{"x", {{0, "batch"}}}};
  spec.outputs = {"y"};
  spec.example_inputs = [](const onnx_export::AxisSizes& s) { return std::vector<Tensor>{randn({s.at("batch"), 3})}; };
  spec.forward = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{relu(mul(in[0], 2.0))}; };
  const onnx_export::ExportReport r = onnx_export::export_onnx(spec, argv[1]);
  const bool ok = r.nodes >= 2 && std::filesystem::file_size(argv[1]) > 0;
  std::printf("kiln::onnx: %lld nodes written to %s\n", static_cast<long long>(r.nodes), argv[1]);
  return ok ? 0 : 1;
}
