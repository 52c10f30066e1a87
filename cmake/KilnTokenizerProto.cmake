# SentencePiece's ModelProto for data/tokenizer/sentencepiece_model.cpp
# (reading `.model` files), compiled from data/tokenizer/sentencepiece_model.proto
# with protoc into an object library linked privately into kiln, like
# train/tensorboard.proto (cmake/KilnTrainDeps.cmake, whose protobuf lookup
# and KILN_PROTO_GENERATED_DIR this reuses). The generated header is included
# as "data/tokenizer/sentencepiece_model.pb.h" from
# ${PROJECT_BINARY_DIR}/generated. sentencepiece_model.cpp also uses
# protobuf-lite's Base64Escape (google/protobuf/stubs/strutil.h, protobuf 3.x).
#
# Include from the top CMakeLists.txt AFTER include(cmake/KilnTrainDeps.cmake):
#   include(cmake/KilnTokenizerProto.cmake)
# With KILN_PROTO_GENERATED_DIR (no protoc), that folder must also hold
# data/tokenizer/sentencepiece_model.pb.{h,cc} made by the same protobuf.
if(KILN_PROTO_GENERATED_DIR)
  set(_kiln_spm_pb ${KILN_PROTO_GENERATED_DIR}/data/tokenizer/sentencepiece_model.pb.cc)
  if(NOT EXISTS ${_kiln_spm_pb})
    message(FATAL_ERROR "kiln: KILN_PROTO_GENERATED_DIR=${KILN_PROTO_GENERATED_DIR} lacks "
                        "data/tokenizer/sentencepiece_model.pb.cc")
  endif()
  add_library(kiln_tokenizer_proto OBJECT ${_kiln_spm_pb})
  target_include_directories(kiln_tokenizer_proto PUBLIC ${KILN_PROTO_GENERATED_DIR} ${Protobuf_INCLUDE_DIR})
  target_link_libraries(kiln_tokenizer_proto PUBLIC ${KILN_PROTOBUF_LITE_LIBRARY})
else()
  add_library(kiln_tokenizer_proto OBJECT ${PROJECT_SOURCE_DIR}/data/tokenizer/sentencepiece_model.proto)
  protobuf_generate(TARGET kiln_tokenizer_proto LANGUAGE cpp PROTOC_OUT_DIR ${PROJECT_BINARY_DIR}/generated)
  target_include_directories(kiln_tokenizer_proto PUBLIC ${PROJECT_BINARY_DIR}/generated)
  target_link_libraries(kiln_tokenizer_proto PUBLIC protobuf::libprotobuf-lite)
endif()
set_target_properties(kiln_tokenizer_proto PROPERTIES POSITION_INDEPENDENT_CODE ON)

target_link_libraries(kiln PRIVATE $<BUILD_INTERFACE:kiln_tokenizer_proto>)
