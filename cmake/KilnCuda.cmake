# The CUDA backend (cuda/), libkiln_cuda (target kiln_cuda, package target
# kiln::cuda; Note [Package layout] in core/components.h): built when CUDA 13
# is found (KILN_CUDA=AUTO) or demanded (ON). Without it libkiln is the same,
# and every CUDA request says "built without CUDA".
set(KILN_WITH_CUDA OFF)

# kiln_find_root_lib(PREFIX ROOT HEADER "NAMES" HINT_DIRS...): PREFIX_INCLUDE_DIR
# and PREFIX_LIBRARY from ROOT alone when ROOT is set (include/, lib/, lib64/),
# else from the hint folders and the system's. NAMES may hold versioned file
# names (libnccl.so.2), which is all a Python wheel ships.
function(kiln_find_root_lib prefix root header names)
  if(root)
    find_path(${prefix}_INCLUDE_DIR ${header} PATHS ${root} PATH_SUFFIXES include NO_DEFAULT_PATH)
    find_library(${prefix}_LIBRARY NAMES ${names} PATHS ${root} PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
  else()
    find_path(${prefix}_INCLUDE_DIR ${header} HINTS ${ARGN} PATH_SUFFIXES include)
    find_library(${prefix}_LIBRARY NAMES ${names} HINTS ${ARGN} PATH_SUFFIXES lib64 lib)
  endif()
endfunction()
# KILN_CUDA=EMU: the same cuda/ sources compiled as C++ against the emulated
# device in cuda/emu/ (Note [Emulated CUDA device] in cuda/emu/emu.h), for
# running every kernel on a CPU (the sanitizer build in CI). No CUDA toolkit,
# cuDNN or NCCL is used; Boost.Context gives each CUDA thread its own stack.
set(KILN_CUDA_EMU OFF)
if(KILN_CUDA STREQUAL "EMU")
  set(KILN_CUDA_EMU ON)
  set(KILN_WITH_CUDA ON)
  find_package(Boost 1.74 REQUIRED COMPONENTS context)
  file(GLOB_RECURSE KILN_CUDA_SOURCES CONFIGURE_DEPENDS cuda/*.cu cuda/*.cpp)
  # cuDNN cannot run here: its attention declines (cuda/emu/sdpa_decline.cpp).
  list(FILTER KILN_CUDA_SOURCES EXCLUDE REGEX "/cuda/attention_cudnn(_graph)?\\.cpp$")
  # nvcc includes cuda_runtime.h in every .cu file; the emulated build does too.
  file(GLOB KILN_CUDA_KERNEL_SOURCES CONFIGURE_DEPENDS cuda/*.cu)
  set_source_files_properties(${KILN_CUDA_KERNEL_SOURCES} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "-xc++;-includecuda_runtime.h")
  add_library(kiln_cuda SHARED ${KILN_CUDA_SOURCES})
  add_library(kiln::cuda ALIAS kiln_cuda)
  target_compile_definitions(kiln_cuda PUBLIC $<BUILD_INTERFACE:KILN_WITH_CUDA=1> $<BUILD_INTERFACE:KILN_CUDA_EMU=1>)
  # The emulated headers shadow the toolkit's for kiln_cuda and the tests.
  target_include_directories(kiln_cuda BEFORE PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/cuda/emu/include>)
  target_link_options(kiln_cuda INTERFACE "LINKER:--no-as-needed")
  target_link_libraries(kiln_cuda PUBLIC kiln PRIVATE Boost::context)
  # Device code as the device compiles it: no contraction into FMA (the
  # intrinsics __dadd_rn/__dmul_rn promise none), CUDA's #pragma unroll unknown to g++.
  target_compile_options(kiln_cuda PRIVATE ${KILN_WARNINGS} -ffp-contract=off -Wno-unknown-pragmas)
  message(STATUS "kiln: CUDA backend EMULATED (cuda/emu): libkiln_cuda runs kernels on the CPU")
elseif(NOT KILN_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(KILN_WITH_CUDA ON)
  elseif(KILN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KILN_CUDA=ON but no CUDA compiler was found")
  endif()
endif()

if(KILN_WITH_CUDA AND NOT KILN_CUDA_EMU)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  enable_language(CUDA)
  # Debian 12's CMake 3.25.1 FindCUDAToolkit marks CUDA::nvToolsExt
  # deprecated whenever the project requires CMake >= 3.25, without checking
  # that the target exists; CUDA 13 ships no libnvToolsExt (NVTX 3 is
  # header-only), so configuring failed there ("set_property could not find
  # TARGET CUDA::nvToolsExt"; CMake added the missing `TARGET` check later).
  # The module reads CMAKE_MINIMUM_REQUIRED_VERSION for that warning alone:
  # it sees 3.24 during the call.
  set(_kiln_cmake_minimum ${CMAKE_MINIMUM_REQUIRED_VERSION})
  set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
  find_package(CUDAToolkit REQUIRED)
  set(CMAKE_MINIMUM_REQUIRED_VERSION ${_kiln_cmake_minimum})
  # CMake 3.25 does not know nvcc's C++20 flag; nvcc 12+ takes -std=c++20.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  file(GLOB_RECURSE KILN_CUDA_SOURCES CONFIGURE_DEPENDS cuda/*.cu cuda/*.cpp)
  list(FILTER KILN_CUDA_SOURCES EXCLUDE REGEX "/cuda/emu/")  # the emulated build's alone
  add_library(kiln_cuda SHARED ${KILN_CUDA_SOURCES})
  add_library(kiln::cuda ALIAS kiln_cuda)
  set_target_properties(kiln_cuda PROPERTIES CUDA_STANDARD 20 CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
                                             CUDA_SEPARABLE_COMPILATION OFF)
  # KILN_WITH_CUDA: for the tests' CUDA-only parts (in the build tree only).
  target_compile_definitions(kiln_cuda PUBLIC $<BUILD_INTERFACE:KILN_WITH_CUDA=1>)
  # A program calls none of libkiln_cuda's symbols itself (libkiln does), so
  # --as-needed (GCC's default on Debian) would drop it: linking kiln::cuda
  # keeps it (Note [Package layout] in core/components.h).
  target_link_options(kiln_cuda INTERFACE "LINKER:--no-as-needed")
  target_link_libraries(kiln_cuda PUBLIC kiln
                                  PRIVATE $<BUILD_INTERFACE:CUDA::cudart> $<BUILD_INTERFACE:CUDA::cublas>
                                          $<BUILD_INTERFACE:CUDA::cublasLt>)
  # cuDNN 9 (fused attention, cuda/attention_cudnn.cpp): the C backend API.
  # CUDNN_ROOT (cache or environment) names an install to use alone, such as
  # the nvidia-cudnn-cu13 wheel's site-packages/nvidia/cudnn, which ships only
  # versioned names (libcudnn.so.9) and keeps cudnn.h beside them; otherwise
  # the CUDA toolkit's folders, then the system's.
  set(CUDNN_ROOT "$ENV{CUDNN_ROOT}" CACHE PATH "cuDNN 9 install to use (include/, lib/), e.g. site-packages/nvidia/cudnn")
  kiln_find_root_lib(KILN_CUDNN "${CUDNN_ROOT}" cudnn.h "cudnn;libcudnn.so.9" ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_DIR})
  if(NOT KILN_CUDNN_INCLUDE_DIR OR NOT KILN_CUDNN_LIBRARY)
    message(FATAL_ERROR "kiln: the CUDA backend needs cuDNN 9 (cudnn.h and libcudnn.so or libcudnn.so.9), not found "
                        "(include: ${KILN_CUDNN_INCLUDE_DIR}, library: ${KILN_CUDNN_LIBRARY}); "
                        "install cuDNN 9 for CUDA or set CUDNN_ROOT (e.g. site-packages/nvidia/cudnn)")
  endif()
  file(STRINGS ${KILN_CUDNN_INCLUDE_DIR}/cudnn_version.h _kiln_cudnn_major REGEX "^#define CUDNN_MAJOR [0-9]+")
  string(REGEX MATCH "[0-9]+" _kiln_cudnn_major "${_kiln_cudnn_major}")
  if(NOT _kiln_cudnn_major OR _kiln_cudnn_major LESS 9)
    message(FATAL_ERROR "kiln: cuDNN 9 or newer is needed, found major version '${_kiln_cudnn_major}' in "
                        "${KILN_CUDNN_INCLUDE_DIR}")
  endif()
  target_include_directories(kiln_cuda PRIVATE ${KILN_CUDNN_INCLUDE_DIR})
  target_link_libraries(kiln_cuda PRIVATE $<BUILD_INTERFACE:${KILN_CUDNN_LIBRARY}>)
  message(STATUS "kiln: cuDNN ${_kiln_cudnn_major} at ${KILN_CUDNN_LIBRARY}")
  # The C++ warnings for the .cpp files; nvcc gets its own. No fast math on
  # the device either (no --use_fast_math): kernels must match their CPU
  # twins (core/cpu/) within the tolerances tests/cuda_test_util.h states.
  target_compile_options(kiln_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${KILN_WARNINGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall -Xcompiler=-Wextra>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${KILN_WERROR}>>:-Xcompiler=-Werror --Werror=all-warnings>)
  message(STATUS "kiln: CUDA backend ON (architectures ${CMAKE_CUDA_ARCHITECTURES}): libkiln_cuda")
elseif(NOT KILN_CUDA_EMU)
  message(STATUS "kiln: CUDA backend OFF (built without CUDA)")
endif()
