# Dependencies of dist/ (data-parallel training):
#  - MPI (OpenMPI from Debian: libopenmpi-dev, openmpi-bin; see Makefile: deps)
#    for the CPU process group and for bootstrapping NCCL. Only the C API is
#    used (MPI_CXX_SKIP_MPICXX: no deprecated C++ bindings).
#  - NCCL, when the CUDA backend is built (KILN_WITH_CUDA): looked for beside
#    the CUDA toolkit and in the system paths. Without it the "nccl" backend
#    answers "built without CUDA" / "built without NCCL".
# Both are linked privately: users of kiln::kiln see only dist/*.h, which
# include neither mpi.h nor nccl.h.
#
# Include from the top CMakeLists.txt AFTER include(cmake/KilnCuda.cmake).
set(MPI_CXX_SKIP_MPICXX TRUE)
find_package(MPI REQUIRED COMPONENTS CXX)
target_link_libraries(kiln PRIVATE MPI::MPI_CXX)
set(KILN_MPIEXEC "${MPIEXEC_EXECUTABLE}")
message(STATUS "kiln: MPI ${MPI_CXX_VERSION} (${MPIEXEC_EXECUTABLE})")

set(KILN_WITH_NCCL OFF)
if(KILN_WITH_CUDA)
  find_path(KILN_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(KILN_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/local/cuda/lib)
  if(KILN_NCCL_INCLUDE_DIR AND KILN_NCCL_LIBRARY)
    set(KILN_WITH_NCCL ON)
    target_include_directories(kiln PRIVATE ${KILN_NCCL_INCLUDE_DIR})
    target_link_libraries(kiln PRIVATE ${KILN_NCCL_LIBRARY})
    target_compile_definitions(kiln PRIVATE KILN_WITH_NCCL=1)
    message(STATUS "kiln: NCCL ${KILN_NCCL_LIBRARY}")
  else()
    message(STATUS "kiln: NCCL not found: the nccl process group is off (built without NCCL)")
  endif()
endif()
