# kiln_find_lib(TARGET HEADER <h> NAMES <lib names...> [SUFFIXES <dirs...>]):
# an IMPORTED target for a plain C library (header + shared library) found with
# find_path/find_library, so the build needs no pkg-config: that keeps the GPU
# source-build kit (tools/gpu_bundle.sh) usable on a machine with nothing but
# a compiler, CMake and CUDA, where CMAKE_FIND_ROOT_PATH points into the kit.
# Used for OpenBLAS, oneDNN, utf8proc, Oniguruma, PCRE2 and ISA-L (cmake/KilnDeps.cmake,
# cmake/KilnTrainDeps.cmake).
function(kiln_find_lib target)
  cmake_parse_arguments(ARG "" "HEADER" "NAMES;SUFFIXES" ${ARGN})
  if(TARGET ${target})
    return()
  endif()
  string(MAKE_C_IDENTIFIER "${target}" id)
  find_path(KILN_${id}_INCLUDE_DIR ${ARG_HEADER} PATH_SUFFIXES ${ARG_SUFFIXES})
  find_library(KILN_${id}_LIBRARY NAMES ${ARG_NAMES} PATH_SUFFIXES ${ARG_SUFFIXES})
  if(NOT KILN_${id}_INCLUDE_DIR OR NOT KILN_${id}_LIBRARY)
    message(FATAL_ERROR "kiln: ${target} not found (header ${ARG_HEADER}: ${KILN_${id}_INCLUDE_DIR}; "
                        "library ${ARG_NAMES}: ${KILN_${id}_LIBRARY}); `make deps` installs it")
  endif()
  add_library(${target} UNKNOWN IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES
    IMPORTED_LOCATION "${KILN_${id}_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${KILN_${id}_INCLUDE_DIR}")
endfunction()

macro(kiln_find_c_deps)
  # Debian's OpenBLAS (pthread flavour) keeps cblas.h in a flavour folder.
  kiln_find_lib(kiln::openblas HEADER cblas.h NAMES openblas libopenblas.so.0
                SUFFIXES openblas-pthread x86_64-linux-gnu/openblas-pthread openblas)
  # oneDNN: float32 GEMM for most shapes (Note [GEMM library per shape]).
  kiln_find_lib(kiln::dnnl HEADER oneapi/dnnl/dnnl.h NAMES dnnl libdnnl.so.2)
  kiln_find_lib(kiln::utf8proc HEADER utf8proc.h NAMES utf8proc libutf8proc.so.2)
  # Oniguruma: the regex engine of HF tokenizers' pre-tokenizers (data/tokenizer/regex.h).
  kiln_find_lib(kiln::onig HEADER oniguruma.h NAMES onig libonig.so.5)
  # PCRE2: the JIT accelerator of built-in patterns (Note [PCRE2 accelerator]).
  kiln_find_lib(kiln::pcre2 HEADER pcre2.h NAMES pcre2-8 libpcre2-8.so.0)
endmacro()
