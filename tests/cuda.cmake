# The CUDA tests (tests/test_cuda_device.cpp) block a stream with a host
# function (cudaLaunchHostFunc) to test the allocator's deferred reuse; in a
# CUDA build they need the CUDA runtime's headers and library.
if(KILN_WITH_CUDA AND NOT KILN_CUDA_EMU)
  target_link_libraries(kiln_tests PRIVATE CUDA::cudart)
endif()
# Static resources of every kernel in libkiln_cuda (tools/cuda_resources.sh):
# registers, stack, spills, shared memory and sm_90 occupancy at the launch's
# block size, read from the built library (nothing is compiled again unless a
# kernel has a stack frame); a kernel that spills or breaks a limit fails.
# The figures are sm_90's: only for a real nvcc build with sm_90 code.
if(KILN_WITH_CUDA AND NOT KILN_CUDA_EMU AND CMAKE_CUDA_ARCHITECTURES MATCHES "(^|;)90")
  get_filename_component(_kiln_cuda_bin "${CMAKE_CUDA_COMPILER}" DIRECTORY)
  add_test(NAME cuda_resources
           COMMAND bash ${PROJECT_SOURCE_DIR}/tools/cuda_resources.sh --source ${PROJECT_SOURCE_DIR}
                   --ptxas ${_kiln_cuda_bin}/ptxas $<TARGET_FILE:kiln_cuda>)
  set_tests_properties(cuda_resources PROPERTIES TIMEOUT 120)
endif()
