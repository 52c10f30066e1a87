# The CUDA tests (tests/test_cuda_device.cpp) block a stream with a host
# function (cudaLaunchHostFunc) to test the allocator's deferred reuse; in a
# CUDA build they need the CUDA runtime's headers and library.
if(KILN_WITH_CUDA)
  target_link_libraries(kiln_tests PRIVATE CUDA::cudart)
endif()
