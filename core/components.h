// Internal (not installed): the optional parts of kiln, and how the core
// library finds them.
//
// Note [Package layout]
// ~~~~~~~~~~~~~~~~~~~~~
// kiln is up to three shared libraries, so that a program that uses only the
// CPU needs no CUDA, cuDNN, NCCL or MPI library, on the machine it is built
// on or the one it runs on:
//   libkiln.so       tensors, autograd, ops, nn, optim, data, train, the CPU
//                    backend, the process-group interface with the one-process
//                    "single" group and DDP, and the public CUDA and MPI/NCCL
//                    entry points (cuda/cuda.h, cuda/stream.h,
//                    dist/process_group.h), which forward to the parts below.
//                    It links none of their libraries. (CMake target kiln,
//                    package target kiln::kiln.)
//   libkiln_cuda.so  the CUDA backend, cuda/: kernels, cuBLASLt GEMMs, cuDNN
//                    attention, streams and events, the device and pinned
//                    caching allocators. Links cudart, cuBLAS, cuBLASLt,
//                    cuDNN. Built when CUDA is found (KILN_CUDA); package
//                    component `cuda`, target kiln::cuda.
//   libkiln_dist.so  the "mpi" and "nccl" process groups
//                    (dist/mpi_process_group.cpp, dist/nccl_process_group.cpp).
//                    Links MPI (KILN_MPI) and NCCL with cudart (KILN_NCCL,
//                    with CUDA); built when either is. Component `dist`,
//                    target kiln::dist.
// The hook: libkiln declares what it needs of a part as an interface
// (cuda::detail::CudaHooks in core/cuda_hooks.h; dist::detail::MpiHooks and
// NcclHooks in dist/dist_hooks.h). The part implements it and registers one
// instance from a static initialiser, i.e. as soon as the library is loaded:
//  - at start-up when the program links it: kiln::cuda and kiln::dist (the
//    kiln tool, the tests and the benchmarks link every part that was
//    built). They pass the linker --no-as-needed, since the program calls
//    none of a part's symbols itself (libkiln does) and --as-needed, GCC's
//    default on Debian, would drop it;
//  - else on the first request for CUDA (backend(cuda), any kiln::cuda::
//    call) or for MPI/NCCL (their process groups, init_process_group under
//    mpirun), when libkiln dlopen()s it from its own folder (load_component
//    below). So a program linked with kiln::kiln alone still runs on CUDA
//    where the package has it, and loads no CUDA library until it asks.
//
// libkiln knows from its build which parts were built beside it
// (component_built): a part that was not is the usual clear error ("kiln was
// built without CUDA", "... without MPI", "... without NCCL") without looking
// at the disk, so a stale libkiln_cuda.so left in a build folder is never
// loaded. A part that was built but does not load (its file is missing, or
// libcudart.so.13 is not on this machine) is an error naming the file and the
// loader's reason; device_count() is then 0 and is_available() false, as on
// a machine without a GPU.
//
// Headers: kiln.h lists the public headers; CMake installs exactly those,
// under include/kiln/, and exports include/ alone, so they are reached as
// <kiln/...> only. They include each other as "kiln/core/tensor.h"; in the
// build tree <build>/include/kiln/<dir> links to <source>/<dir>
// (CMakeLists.txt) so the same spelling resolves there. The library's .cpp
// files, the internal headers, the tests and the tools include by source
// path ("core/tensor.h"). A public header must not include an internal one;
// `make test-install` compiles kiln.h against the installed tree alone.
#pragma once

#include <string>

namespace kiln::detail {

enum class Component {
  Cuda,  // libkiln_cuda.so
  Mpi,   // libkiln_dist.so, built with MPI
  Nccl,  // libkiln_dist.so, built with NCCL
};

// True when this kiln was built with the part (CMake found and enabled it),
// whether or not its library is loaded (yet).
bool component_built(Component c);

// Loads the library holding `c` from libkiln.so's own folder, once per
// library (dlopen RTLD_NOW | RTLD_GLOBAL: OpenMPI's plugins need libmpi's
// symbols global); it registers its hooks as it loads. Returns "" when it is
// loaded, else why not ("/opt/kiln/lib/libkiln_cuda.so: libcudnn.so.9: cannot
// open shared object file ..."). For a part that component_built().
std::string load_component(Component c);

}  // namespace kiln::detail
