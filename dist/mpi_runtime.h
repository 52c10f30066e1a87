// Internal to dist/: MPI start-up and shut-down, shared by the process groups.
// No mpi.h here: libkiln defines these (dist/process_group.cpp) over the MPI
// hooks of libkiln_dist (dist/dist_hooks.h); without them mpi_initialize()
// is the error "built without MPI", the others do nothing (mpi_abort exits).
#pragma once

namespace kiln::dist::detail {

// MPI_Init_thread(MPI_THREAD_SERIALIZED) once; nothing when MPI is already up.
void mpi_initialize();
// MPI_Finalize, once, and only when mpi_initialize() started MPI.
void mpi_finalize();
// MPI_Abort(MPI_COMM_WORLD, code) when MPI is up; never returns.
[[noreturn]] void mpi_abort(int code);
bool mpi_is_running();  // initialised and not finalised

}  // namespace kiln::dist::detail
