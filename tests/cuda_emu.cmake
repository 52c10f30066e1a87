# The emulated CUDA device (KILN_CUDA=EMU, Note [Emulated CUDA device] in
# cuda/emu/emu.h): kiln_tests runs every CUDA test on it (tests/test_cuda_*.cpp,
# tests/test_cuda_emu.cpp); here, training end to end on it (float32, bf16,
# fp16 + grad scaler, stop and --resume) against the CPU.
if(KILN_CUDA_EMU AND TARGET kiln_cli)
  add_test(NAME emu_train COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/emu_train.sh $<TARGET_FILE:kiln_cli>
                                  ${CMAKE_CURRENT_BINARY_DIR}/emu_train)
  set_tests_properties(emu_train PROPERTIES TIMEOUT 900)
endif()
# The kernel tests again with the threads of each block in a seeded random
# order between barriers and independent streams interleaved at random: a
# kernel that relies on warp-synchronous luck, or a missing stream wait,
# gives a different answer here.
if(KILN_CUDA_EMU)
  add_test(NAME emu_shuffled_kernels
           COMMAND kiln_tests --gtest_brief=1
                   --gtest_filter=CudaKernels*:CudaGatherScan*:CudaIndex*:CudaLazyIndexCheck*:CudaOps*:CudaFused*:CudaDecoderOps*:DeviceStaging*)
  set_tests_properties(emu_shuffled_kernels PROPERTIES TIMEOUT 900
                       ENVIRONMENT "KILN_EMU_SCHEDULE=shuffle:7;KILN_EMU_STREAMS=random:7")
endif()
