// `kiln info`: how this kiln was built and what it runs on here: build
// options, threads, CUDA devices, the versions of the CUDA libraries loaded
// (driver, runtime, cuBLASLt, cuDNN, NCCL) and, with --libs, the path of
// every shared library the process has loaded. The GPU check
// (tools/gpu_check.sh) runs it first: it shows which cuDNN and NCCL files a
// bundle picked up, and `--require cuda,nccl` makes a missing part an error.
#include <link.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/build_info.h"
#include "core/cpu/gemm_library.h"
#include "core/device.h"
#include "core/error.h"
#include "core/parallel.h"
#include "cuda/cuda.h"
#include "dist/process_group.h"
#include "tools/command.h"

namespace kiln::tools {
namespace {

struct InfoArgs {
  bool libs = false;
  std::vector<std::string> require;
};

// Every loaded shared object, as the dynamic linker lists them (link order, then dlopen order).
std::vector<std::string> loaded_libraries() {
  std::vector<std::string> paths;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0')
          static_cast<std::vector<std::string>*>(data)->push_back(info->dlpi_name);
        return 0;
      },
      &paths);
  return paths;
}

void check_required(const std::vector<std::string>& parts) {
  for (const std::string& part : parts) {
    if (part == "cuda") {
      KILN_CHECK(cuda_built(), "kiln info --require cuda: ", cuda_unavailable_reason());
      KILN_CHECK(cuda::device_count() > 0, "kiln info --require cuda: no CUDA device is visible");
    } else if (part == "nccl") {
      KILN_CHECK(dist::nccl_built(), "kiln info --require nccl: this kiln was built without NCCL");
    } else if (part == "mpi") {
      KILN_CHECK(dist::built_with_mpi(), "kiln info --require mpi: this kiln was built without MPI");
    } else {
      fail("kiln info --require: unknown part '", part, "' (expected cuda, nccl or mpi)");
    }
  }
}

int run_info(const InfoArgs& args) {
  std::ostringstream out;
  out << "kiln build\n";
  for (const auto& [k, v] : build_info()) out << "  " << k << ": " << v << "\n";
  out << "runtime\n  threads: " << get_num_threads() << "\n";
  out << "  cpu gemm: " << cpu::gemm_libraries_description() << "\n";
  const int n = cuda::device_count();
  out << "  cuda devices: " << n << "\n";
  for (int d = 0; d < n; ++d) out << "    cuda:" << d << " " << cuda::device_name(d) << "\n";
  for (const auto& [k, v] : cuda::library_versions()) out << "  " << k << ": " << v << "\n";
  if (dist::nccl_built()) out << "  NCCL: " << dist::nccl_version() << "\n";
  if (args.libs) {
    out << "loaded libraries\n";
    for (const std::string& p : loaded_libraries()) {
      std::error_code ec;
      const std::filesystem::path real = std::filesystem::canonical(p, ec);
      out << "  " << p;
      if (!ec && real.string() != p) out << " -> " << real.string();
      out << "\n";
    }
  }
  std::cout << out.str() << std::flush;
  check_required(args.require);
  return 0;
}

const Registrar kRegistrar{"info", [](CLI::App& app) -> std::function<int()> {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* cmd = app.add_subcommand("info", "How this kiln was built; devices and CUDA library versions here");
  cmd->add_flag("--libs", args->libs, "Also list every shared library loaded, with the file it resolves to");
  cmd->add_option("--require", args->require, "Fail unless these parts are in: cuda (built and a device), nccl, mpi")
      ->delimiter(',');
  return [args] { return run_info(*args); };
}};

}  // namespace
}  // namespace kiln::tools
