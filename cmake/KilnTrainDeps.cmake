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
#
# KILN_PROTO_GENERATED_DIR: a folder holding tensorboard.pb.{h,cc} already made
# by the same protobuf version (the GPU source-build kit carries one, since
# the GPU machine has no protoc); then protoc is not needed.
set(KILN_PROTO_GENERATED_DIR "" CACHE PATH "Pre-generated train/tensorboard.pb.{h,cc} (no protoc needed)")
kiln_find_lib(kiln::isal HEADER isa-l.h NAMES isal libisal.so.2)

if(KILN_PROTO_GENERATED_DIR)
  find_path(Protobuf_INCLUDE_DIR google/protobuf/message_lite.h)
  find_library(KILN_PROTOBUF_LITE_LIBRARY NAMES protobuf-lite libprotobuf-lite.so.32)
  if(NOT Protobuf_INCLUDE_DIR OR NOT KILN_PROTOBUF_LITE_LIBRARY)
    message(FATAL_ERROR "kiln: protobuf-lite headers or library not found (${Protobuf_INCLUDE_DIR}, "
                        "${KILN_PROTOBUF_LITE_LIBRARY})")
  endif()
  if(NOT EXISTS ${KILN_PROTO_GENERATED_DIR}/train/tensorboard.pb.cc)
    message(FATAL_ERROR "kiln: KILN_PROTO_GENERATED_DIR=${KILN_PROTO_GENERATED_DIR} lacks train/tensorboard.pb.cc")
  endif()
  add_library(kiln_train_deps OBJECT ${KILN_PROTO_GENERATED_DIR}/train/tensorboard.pb.cc)
  target_include_directories(kiln_train_deps PUBLIC ${KILN_PROTO_GENERATED_DIR} ${Protobuf_INCLUDE_DIR})
  target_link_libraries(kiln_train_deps PUBLIC ${KILN_PROTOBUF_LITE_LIBRARY} kiln::isal)
else()
  find_package(Protobuf REQUIRED)
  add_library(kiln_train_deps OBJECT ${PROJECT_SOURCE_DIR}/train/tensorboard.proto)
  protobuf_generate(TARGET kiln_train_deps LANGUAGE cpp PROTOC_OUT_DIR ${PROJECT_BINARY_DIR}/generated)
  target_include_directories(kiln_train_deps PUBLIC ${PROJECT_BINARY_DIR}/generated)
  target_link_libraries(kiln_train_deps PUBLIC protobuf::libprotobuf-lite kiln::isal)
endif()
set_target_properties(kiln_train_deps PROPERTIES POSITION_INDEPENDENT_CODE ON)

target_link_libraries(kiln PRIVATE $<BUILD_INTERFACE:kiln_train_deps>)
