// Finding kiln's optional libraries (Note [Package layout] in core/components.h).
// KILN_BUILT_CUDA, KILN_BUILT_MPI and KILN_BUILT_NCCL (0 or 1) come from
// CMake for this file alone (CMakeLists.txt).
#include "core/components.h"

#include <dlfcn.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <system_error>

namespace kiln::detail {
namespace {

const char* library_of(Component c) { return c == Component::Cuda ? "libkiln_cuda.so" : "libkiln_dist.so"; }

// The folder libkiln.so was loaded from ("" if the loader does not say).
std::string own_folder() {
  static const char marker = 0;
  Dl_info info{};
  if (dladdr(&marker, &info) == 0 || info.dli_fname == nullptr) return "";
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::absolute(info.dli_fname, ec);
  return ec ? std::string() : self.parent_path().string();
}

}  // namespace

bool component_built(Component c) {
  switch (c) {
    case Component::Cuda: return KILN_BUILT_CUDA != 0;
    case Component::Mpi: return KILN_BUILT_MPI != 0;
    case Component::Nccl: return KILN_BUILT_NCCL != 0;
  }
  return false;
}

std::string load_component(Component c) {
  static std::mutex mutex;
  static std::map<std::string, std::string> outcome;  // library -> "" (loaded) or why not
  const std::string name = library_of(c);
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = outcome.find(name); it != outcome.end()) return it->second;
  const std::string folder = own_folder();
  const std::string path = folder.empty() ? name : folder + "/" + name;
  std::string why;
  std::error_code ec;
  if (!folder.empty() && !std::filesystem::exists(path, ec)) {
    why = path + " is missing (it belongs beside libkiln.so)";
  } else if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {  // never closed
    const char* err = dlerror();
    why = err != nullptr ? err : path + ": dlopen failed";
  }
  outcome.emplace(name, why);
  return why;
}

}  // namespace kiln::detail
