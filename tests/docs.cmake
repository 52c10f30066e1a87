# The C++ in docs/tutorial.md is cut from examples/ (built and run against the
# installed package by `make test-install`): this fails when the two drift.
add_test(NAME doc_snippets COMMAND python3 ${PROJECT_SOURCE_DIR}/tools/check_snippets.py
                                   ${PROJECT_SOURCE_DIR}/docs/tutorial.md)
