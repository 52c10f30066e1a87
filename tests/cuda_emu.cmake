# The emulated CUDA device (KILN_CUDA=EMU, Note [Emulated CUDA device] in
# cuda/emu/emu.h): kiln_tests runs every CUDA test on it (tests/test_cuda_*.cpp,
# tests/test_cuda_emu.cpp); here, training end to end on it (float32, bf16,
# fp16 + grad scaler, stop and --resume) against the CPU.
if(KILN_CUDA_EMU AND TARGET kiln_cli)
  add_test(NAME emu_train COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/emu_train.sh $<TARGET_FILE:kiln_cli>
                                  ${CMAKE_CURRENT_BINARY_DIR}/emu_train)
  set_tests_properties(emu_train PROPERTIES TIMEOUT 900)
endif()
