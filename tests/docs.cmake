# The C++ in docs/tutorial.md is cut from examples/ (built and run against the
# installed package by `make test-install`), docs/onnx.md's from
# tests/test_onnx_export.cpp, docs/tokenizer.md's from examples/hf_tokenizer.cpp:
# this fails when they drift.
add_test(NAME doc_snippets COMMAND python3 ${PROJECT_SOURCE_DIR}/tools/check_snippets.py
                                   ${PROJECT_SOURCE_DIR}/docs/tutorial.md ${PROJECT_SOURCE_DIR}/docs/onnx.md
                                   ${PROJECT_SOURCE_DIR}/docs/tokenizer.md)
# bench/scaling_model.py's formulas, and docs/distributed.md ("Cost at scale")
# holding the tables it prints.
add_test(NAME scaling_model COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/scaling_model_test.py)
