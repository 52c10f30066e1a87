# `kiln tokenize` against Hugging Face: ctest runs this file in script mode
# (cmake -P) to write the reference ids with tests/reference/tokenize_reference.py,
# run the CLI on the same input and compare the outputs byte for byte.
#   tokenize_cli_edge_cases[_cased]  tests/data/unicode_edge_cases.txt
#   tokenize_cli_wikitext            $KILN_DATA/wikitext-2/valid.txt
# KILN_DATA / KILN_PYTHON override the data folder / interpreter at test time.
if(CMAKE_SCRIPT_MODE_FILE)
  # Arguments: -DKILN= -DSOURCE_DIR= -DDEFAULT_DATA= -DDEFAULT_PYTHON= -DOUT= -DINPUT= [-DCASED=1]
  set(data "${DEFAULT_DATA}")
  if(DEFINED ENV{KILN_DATA} AND NOT "$ENV{KILN_DATA}" STREQUAL "")
    set(data "$ENV{KILN_DATA}")
  endif()
  set(python "${DEFAULT_PYTHON}")
  if(DEFINED ENV{KILN_PYTHON} AND NOT "$ENV{KILN_PYTHON}" STREQUAL "")
    set(python "$ENV{KILN_PYTHON}")
  endif()
  string(REPLACE "@DATA@" "${data}" input "${INPUT}")
  set(vocab "${data}/vocab/bert-base-uncased-vocab.txt")
  foreach(f "${input}" "${vocab}")
    if(NOT EXISTS "${f}")
      message(FATAL_ERROR "missing data file ${f} (set KILN_DATA)")
    endif()
  endforeach()
  set(cased_flag)
  if(CASED)
    set(cased_flag --cased)
  endif()
  execute_process(
    COMMAND "${python}" "${SOURCE_DIR}/tests/reference/tokenize_reference.py" --vocab "${vocab}"
            --mode lines --input "${input}" --output "${OUT}.hf" ${cased_flag}
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "reference script failed (${rc})")
  endif()
  execute_process(COMMAND "${KILN}" tokenize --vocab "${vocab}" ${cased_flag}
                  INPUT_FILE "${input}" OUTPUT_FILE "${OUT}.kiln" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kiln tokenize failed (${rc})")
  endif()
  file(STRINGS "${OUT}.hf" hf_lines)
  file(STRINGS "${OUT}.kiln" kiln_lines)
  list(LENGTH hf_lines n_hf)
  list(LENGTH kiln_lines n_kiln)
  file(READ "${OUT}.hf" hf_text)
  file(READ "${OUT}.kiln" kiln_text)
  if(NOT hf_text STREQUAL kiln_text)
    set(mismatches 0)
    math(EXPR last "${n_hf} - 1")
    foreach(i RANGE ${last})
      list(GET hf_lines ${i} a)
      if(i LESS n_kiln)
        list(GET kiln_lines ${i} b)
      else()
        set(b "<missing>")
      endif()
      if(NOT a STREQUAL b)
        math(EXPR mismatches "${mismatches} + 1")
        math(EXPR line "${i} + 1")
        message(STATUS "line ${line}:\n  hf:   ${a}\n  kiln: ${b}")
      endif()
    endforeach()
    message(FATAL_ERROR "kiln tokenize differs from HF on ${input}: ${n_hf} vs ${n_kiln} lines, ${mismatches} mismatching")
  endif()
  message(STATUS "kiln tokenize matches HF on ${input}: ${n_hf} lines, 0 mismatches")
  file(REMOVE "${OUT}.hf" "${OUT}.kiln")
  return()
endif()

if(TARGET kiln_cli)
  set(_tok_dir ${PROJECT_BINARY_DIR}/tokenizer_golden)
  file(MAKE_DIRECTORY ${_tok_dir})
  foreach(_case edge_cases edge_cases_cased wikitext)
    if(_case MATCHES "^edge")
      set(_input ${PROJECT_SOURCE_DIR}/tests/data/unicode_edge_cases.txt)
    else()
      set(_input "@DATA@/wikitext-2/valid.txt")
    endif()
    set(_cased 0)
    if(_case MATCHES "cased")
      set(_cased 1)
    endif()
    add_test(NAME tokenize_cli_${_case}
      COMMAND ${CMAKE_COMMAND} -DKILN=$<TARGET_FILE:kiln_cli> -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
              -DDEFAULT_DATA=${KILN_DEFAULT_DATA} -DDEFAULT_PYTHON=${KILN_DEFAULT_PYTHON}
              -DOUT=${_tok_dir}/cli_${_case} -DINPUT=${_input} -DCASED=${_cased}
              -P ${CMAKE_CURRENT_LIST_FILE})
    set_tests_properties(tokenize_cli_${_case} PROPERTIES TIMEOUT 300)
  endforeach()
endif()

# `kiln tokenize --tokenizer` / `--decode` against HF tokenizers (GPT-2, XLM-R).
if(TARGET kiln_cli)
  add_test(NAME tokenize_cli_hf_tokenizers
    COMMAND bash ${PROJECT_SOURCE_DIR}/tests/tokenize_hf_cli.sh $<TARGET_FILE:kiln_cli> ${KILN_DEFAULT_PYTHON}
            ${KILN_DEFAULT_DATA} ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/tokenizer_golden/hf_cli)
  set_tests_properties(tokenize_cli_hf_tokenizers PROPERTIES TIMEOUT 300)
endif()

# The training tools (pretrain, prepare, finetune, evaluate, predict, embed)
# on a model whose tokenizer is a Unigram tokenizer.json, checked by transformers.
if(TARGET kiln_cli)
  add_test(NAME tokenizer_train_cli
    COMMAND bash ${PROJECT_SOURCE_DIR}/tests/tokenizer_train_cli.sh $<TARGET_FILE:kiln_cli>
            ${PROJECT_SOURCE_DIR}/.venv-hf/bin/python
            ${KILN_DEFAULT_DATA} ${PROJECT_BINARY_DIR}/tokenizer_train_cli)
  set_tests_properties(tokenizer_train_cli PROPERTIES TIMEOUT 600)
endif()
