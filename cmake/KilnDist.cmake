# The mpi and nccl process groups, libkiln_dist (target kiln_dist, package
# target kiln::dist; Note [Package layout] in core/components.h), built when
# either is; libkiln keeps the interface, the "single" group and DDP.
#  - MPI (OpenMPI from Debian: libopenmpi-dev, openmpi-bin; see Makefile: deps)
#    for the CPU process group and for bootstrapping NCCL across processes
#    (KILN_MPI, ON by default; a one-process NCCL group needs no MPI). Only the C API is
#    used (MPI_CXX_SKIP_MPICXX: no deprecated C++ bindings).
#  - NCCL, when the CUDA backend is built (KILN_WITH_CUDA): looked for beside
#    the CUDA toolkit and in the system paths. Without it the "nccl" backend
#    answers "built without CUDA" / "built without NCCL".
# Both are linked privately: users see only dist/*.h, which include neither
# mpi.h nor nccl.h.
#
# Include from the top CMakeLists.txt AFTER include(cmake/KilnCuda.cmake).
option(KILN_MPI "Build the mpi process group (OpenMPI); OFF: \"built without MPI\", one process or NCCL alone" ON)
set(KILN_WITH_MPI OFF)
set(KILN_MPIEXEC "")
if(KILN_MPI)
  set(MPI_CXX_SKIP_MPICXX TRUE)
  find_package(MPI REQUIRED COMPONENTS CXX)
  set(KILN_WITH_MPI ON)
  set(KILN_MPIEXEC "${MPIEXEC_EXECUTABLE}")
  message(STATUS "kiln: MPI ${MPI_CXX_VERSION} (${MPIEXEC_EXECUTABLE})")
else()
  message(STATUS "kiln: MPI off (KILN_MPI=OFF): the mpi process group says \"built without MPI\"")
endif()

# NCCL: AUTO builds the nccl group when NCCL is found, ON demands it (the GPU
# check's source build does: a GPU build without NCCL must not pass as one
# with it), OFF leaves it out. NCCL_ROOT (cache or environment) names an
# install to use alone, e.g. the nvidia-nccl-cu13 wheel's
# site-packages/nvidia/nccl (versioned libnccl.so.2 only, nccl.h in include/).
set(KILN_NCCL "AUTO" CACHE STRING "Build the nccl process group: AUTO, ON or OFF")
set(NCCL_ROOT "$ENV{NCCL_ROOT}" CACHE PATH "NCCL install to use (include/, lib/), e.g. site-packages/nvidia/nccl")
set(KILN_WITH_NCCL OFF)
if(KILN_WITH_CUDA AND NOT KILN_CUDA_EMU AND NOT KILN_NCCL STREQUAL "OFF")
  kiln_find_root_lib(KILN_NCCL "${NCCL_ROOT}" nccl.h "nccl;libnccl.so.2"
                     ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/include /usr/local/cuda/lib64)
  if(KILN_NCCL_INCLUDE_DIR AND KILN_NCCL_LIBRARY)
    set(KILN_WITH_NCCL ON)
    message(STATUS "kiln: NCCL ${KILN_NCCL_LIBRARY}")
  elseif(KILN_NCCL STREQUAL "ON")
    message(FATAL_ERROR "kiln: KILN_NCCL=ON but NCCL was not found (nccl.h: ${KILN_NCCL_INCLUDE_DIR}, library: "
                        "${KILN_NCCL_LIBRARY}); set NCCL_ROOT, e.g. to site-packages/nvidia/nccl")
  else()
    message(STATUS "kiln: NCCL not found: the nccl process group is off (built without NCCL)")
  endif()
elseif(KILN_NCCL STREQUAL "ON")
  message(FATAL_ERROR "kiln: KILN_NCCL=ON needs the CUDA backend (KILN_CUDA)")
endif()

if(KILN_WITH_MPI OR KILN_WITH_NCCL)
  add_library(kiln_dist SHARED)
  add_library(kiln::dist ALIAS kiln_dist)
  target_compile_options(kiln_dist PRIVATE ${KILN_WARNINGS})
  target_link_libraries(kiln_dist PUBLIC kiln)
  target_link_options(kiln_dist INTERFACE "LINKER:--no-as-needed")  # as kiln_cuda's (cmake/KilnCuda.cmake)
  if(KILN_WITH_MPI)
    target_sources(kiln_dist PRIVATE dist/mpi_process_group.cpp)
    target_link_libraries(kiln_dist PRIVATE $<BUILD_INTERFACE:MPI::MPI_CXX>)
  endif()
  if(KILN_WITH_NCCL)
    target_sources(kiln_dist PRIVATE dist/nccl_process_group.cpp)
    target_include_directories(kiln_dist PRIVATE ${KILN_NCCL_INCLUDE_DIR})
    target_link_libraries(kiln_dist PRIVATE $<BUILD_INTERFACE:${KILN_NCCL_LIBRARY}> $<BUILD_INTERFACE:CUDA::cudart>)
  endif()
endif()
