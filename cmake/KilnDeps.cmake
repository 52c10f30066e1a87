# Third-party dependencies, all from Debian packages (see Makefile: deps).
find_package(Threads REQUIRED)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(nlohmann_json 3 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)

# Linked privately: users of kiln::kiln do not see these headers.
add_library(kiln_deps_private INTERFACE)
target_link_libraries(kiln_deps_private INTERFACE
  Eigen3::Eigen nlohmann_json::nlohmann_json PkgConfig::OPENBLAS PkgConfig::UTF8PROC)
install(TARGETS kiln_deps_private EXPORT kilnTargets)
