# Third-party dependencies, all from Debian packages (see Makefile: deps).
# Found without pkg-config (cmake/KilnFindLib.cmake), so the same lookups work
# against the GPU source-build kit (tools/gpu_bundle.sh, CMAKE_FIND_ROOT_PATH).
find_package(Threads REQUIRED)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(nlohmann_json 3 REQUIRED)
include(${CMAKE_CURRENT_LIST_DIR}/KilnFindLib.cmake)
kiln_find_c_deps()

# Linked privately: users of kiln::kiln do not see these headers.
add_library(kiln_deps_private INTERFACE)
target_link_libraries(kiln_deps_private INTERFACE
  Eigen3::Eigen nlohmann_json::nlohmann_json kiln::openblas kiln::utf8proc)
install(TARGETS kiln_deps_private EXPORT kilnTargets)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/KilnFindLib.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
