// kiln's emulated CUDA (Note [Emulated CUDA device] in cuda/emu/emu.h):
// cudaDataType_t, the element-type tag that the CUDA math libraries' layouts
// carry, with the toolkit's names and values. Only the real floating types
// kiln's cuBLASLt stand-in (cublasLt.h) computes with, plus the two integer
// tags a layout may name; no complex or FP8 types, no libraryPropertyType.
#ifndef KILN_EMU_LIBRARY_TYPES_H_
#define KILN_EMU_LIBRARY_TYPES_H_

enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_8I = 3,
  CUDA_R_32I = 10,
  CUDA_R_16BF = 14,
};
typedef enum cudaDataType_t cudaDataType;

#endif  // KILN_EMU_LIBRARY_TYPES_H_
