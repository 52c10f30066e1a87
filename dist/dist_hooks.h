// Internal (not installed): the "mpi" and "nccl" process groups as libkiln
// sees them (Note [Package layout] in core/components.h). libkiln_dist
// implements MpiHooks (dist/mpi_process_group.cpp, when built with MPI) and
// NcclHooks (dist/nccl_process_group.cpp, with NCCL) and registers them as it
// loads; libkiln's new_mpi_group, new_nccl_group, nccl_built, nccl_version,
// built_with_mpi (dist/process_group.h) and MPI start-up and shut-down
// (dist/mpi_runtime.h) forward to them, in dist/process_group.cpp.
#pragma once

#include <string>

#include "dist/process_group.h"

namespace kiln::dist::detail {

class MpiHooks {
 public:
  virtual ~MpiHooks() = default;
  // The contracts of dist/mpi_runtime.h and new_mpi_group.
  virtual void initialize() = 0;
  virtual void finalize() = 0;
  [[noreturn]] virtual void abort(int code) = 0;
  virtual bool is_running() = 0;
  virtual ProcessGroupPtr new_group(double timeout_seconds) = 0;
};

class NcclHooks {
 public:
  virtual ~NcclHooks() = default;
  // The contracts of new_nccl_group and nccl_version.
  virtual ProcessGroupPtr new_group(const ProcessGroupPtr& bootstrap, int device, double timeout_seconds) = 0;
  virtual std::string version() = 0;
};

// Called once each by libkiln_dist as it loads; the hooks live until the process ends.
void register_mpi_hooks(MpiHooks* hooks);
void register_nccl_hooks(NcclHooks* hooks);

}  // namespace kiln::dist::detail
