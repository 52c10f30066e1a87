# Dependencies of train/metric_log.cpp (TensorBoard event files), all Debian
# packages: protobuf-compiler + libprotobuf-dev (protoc and the lite runtime),
# libisal-dev (Intel ISA-L, whose crc32_iscsi is CRC-32C).
#
# Include from the top CMakeLists.txt AFTER add_library(kiln ...):
#   include(cmake/KilnTrainDeps.cmake)
# It compiles the protoc output of train/tensorboard.proto into an object
# library linked privately into kiln; the generated header is included as
# "train/tensorboard.pb.h" from ${PROJECT_BINARY_DIR}/generated. Users of
# kiln::kiln (a shared library) see neither protobuf nor ISA-L.
find_package(Protobuf REQUIRED)
pkg_check_modules(ISAL REQUIRED IMPORTED_TARGET libisal)

add_library(kiln_train_deps OBJECT ${PROJECT_SOURCE_DIR}/train/tensorboard.proto)
set_target_properties(kiln_train_deps PROPERTIES POSITION_INDEPENDENT_CODE ON)
protobuf_generate(TARGET kiln_train_deps LANGUAGE cpp PROTOC_OUT_DIR ${PROJECT_BINARY_DIR}/generated)
target_include_directories(kiln_train_deps PUBLIC ${PROJECT_BINARY_DIR}/generated)
target_link_libraries(kiln_train_deps PUBLIC protobuf::libprotobuf-lite PkgConfig::ISAL)

target_link_libraries(kiln PRIVATE kiln_train_deps)
