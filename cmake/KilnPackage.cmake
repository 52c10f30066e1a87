# Debian packages of kiln: `make package` (cpack -G DEB in the build folder).
#
# Note [Debian packages]
# ~~~~~~~~~~~~~~~~~~~~~~
# One package per install component (CMakeLists.txt):
#   kiln       the tool and the runtime libraries (libkiln, libkiln_onnx)
#   kiln-dev   the headers and the CMake package (find_package(kiln))
#   kiln-cuda  libkiln_cuda, the CUDA backend (when built with CUDA)
#   kiln-dist  libkiln_dist, the mpi and nccl process groups (with MPI or NCCL)
# libkiln loads the CUDA and dist libraries from its own folder on the first
# request (Note [Package layout] in core/components.h), so `kiln` runs
# without the other two, and installing kiln-cuda is what turns CUDA on.
# Depends: dpkg-shlibdeps reads each package's ELF files and names the Debian
# packages of the libraries they load (libopenblas0, libdnnl2, libonig5, libmpi40 ...);
# kiln's own packages depend on `kiln` of the same version. CUDA, cuBLAS,
# cuDNN and NCCL are NVIDIA's, not Debian's: no Debian package holds them, so
# kiln-cuda and kiln-dist cannot name one; their description says what they
# need, and the libraries' run path (the CUDA toolkit's folder at build time)
# is where they are looked for.
# Files land under /usr (lib/, bin/, include/kiln/, lib/cmake/kiln/).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kiln)
set(CPACK_PACKAGE_VENDOR "kiln developers")
set(CPACK_PACKAGE_CONTACT "kiln developers <kiln@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "C++ deep-learning framework for transformers")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)  # CPACK_COMPONENT_<C>_DEPENDS -> Depends: kiln (= version)
# The libraries' sonames carry no version (libkiln.so: libkiln finds its
# parts by that name, Note [Package layout]), so there is no shlibs file for
# other packages to depend on a library version through; kiln's own packages
# are held to one version by their Depends (= version) instead.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS OFF)

set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME kiln)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
    "C++ deep-learning framework for transformers: the kiln tool and libraries\n"
    "Tensors, reverse-mode autograd and BERT with Hugging Face checkpoints and tokenizers;\n"
    "the kiln command pretrains, fine-tunes, evaluates, predicts, embeds and exports (ONNX).")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME kiln-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEV_DEPENDS runtime)
# The public headers include <nlohmann/json.hpp> (kilnConfig.cmake finds it);
# shlibdeps sees no ELF file here, so this is said by hand.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "nlohmann-json3-dev (>= 3)")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "kiln headers and CMake package\n"
    "find_package(kiln) and target kiln::kiln; <kiln/kiln.h> is the whole public API.")
if(TARGET kiln_cuda)
  list(APPEND CPACK_COMPONENTS_ALL cuda)
  set(CPACK_DEBIAN_CUDA_PACKAGE_NAME kiln-cuda)
  set(CPACK_COMPONENT_CUDA_DEPENDS runtime)
  set(CPACK_COMPONENT_CUDA_DESCRIPTION
      "kiln's CUDA backend (libkiln_cuda)\n"
      "Needs NVIDIA's CUDA ${CUDAToolkit_VERSION_MAJOR} runtime, cuBLAS/cuBLASLt and cuDNN 9 (not Debian "
      "packages) in ${CUDAToolkit_LIBRARY_DIR}.")
endif()
if(TARGET kiln_dist)
  list(APPEND CPACK_COMPONENTS_ALL dist)
  set(CPACK_DEBIAN_DIST_PACKAGE_NAME kiln-dist)
  set(CPACK_COMPONENT_DIST_DEPENDS runtime)
  set(CPACK_COMPONENT_DIST_DESCRIPTION
      "kiln's mpi and nccl process groups (libkiln_dist)\n"
      "Data-parallel training under mpirun (Open MPI); the nccl group needs NVIDIA's NCCL and CUDA runtime.")
endif()
include(CPack)
