# Third-party dependencies, all from Debian packages (see Makefile: deps).
# Found without pkg-config (cmake/KilnFindLib.cmake), so the same lookups work
# against the GPU source-build kit (tools/gpu_bundle.sh, CMAKE_FIND_ROOT_PATH).
find_package(Threads REQUIRED)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(nlohmann_json 3 REQUIRED)
include(${CMAKE_CURRENT_LIST_DIR}/KilnFindLib.cmake)
kiln_find_c_deps()

# Linked privately, in the build tree only: users of kiln::kiln see none of
# these headers and need none of them to build (nlohmann_json, which public
# headers include, is linked publicly as well: CMakeLists.txt).
add_library(kiln_deps_private INTERFACE)
target_link_libraries(kiln_deps_private INTERFACE
  Eigen3::Eigen nlohmann_json::nlohmann_json kiln::openblas kiln::dnnl kiln::utf8proc
  gomp)  # libgomp: oneDNN's OpenMP, told one thread per caller (core/cpu/gemm_library.cpp)

# Note [Oniguruma's POSIX symbols]: libonig.so also exports POSIX regcomp /
# regexec under their plain names. A program that lists libonig among its
# own direct dependencies ahead of libc gets Oniguruma's regcomp for every
# POSIX regex call (GoogleTest's death-test matchers broke that way). So
# libonig is linked to libkiln alone, privately; programs reach it only
# through libkiln, after libc in the loader's search order, and nothing but
# data/tokenizer/regex.cpp includes oniguruma.h.
