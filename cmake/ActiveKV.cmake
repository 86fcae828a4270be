# Shared build helpers: warnings, sanitizers, and how a test is declared.
# A test lives beside the concept it tests (src/core/budget_test.cpp beside budget.cpp)
# and is declared with activekv_test(NAME SOURCES ... LIBS ...).

set(ACTIVEKV_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion)

if(ACTIVEKV_SANITIZE)
  string(REPLACE ";" "," _ak_sanitizers "${ACTIVEKV_SANITIZE}")
  add_compile_options(-fsanitize=${_ak_sanitizers} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_ak_sanitizers})
endif()

if(ACTIVEKV_EXPENSIVE_ASSERTS)
  add_compile_definitions(ACTIVEKV_EXPENSIVE_ASSERTS=1)
endif()

function(activekv_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${ACTIVEKV_WARNINGS}>)
  target_link_libraries(${name} PUBLIC ${ARG_LIBS} Threads::Threads)
endfunction()

# activekv_test(NAME SOURCES a_test.cpp ... LIBS lib ... [LABELS l ...] [NO_ALLOC_COUNTER] [COST seconds])
# COST: about how long the test takes; `ctest -j` starts the costliest tests first where it has
# no timings of its own yet (a clean CI machine), so a long test does not start last and end alone.
# Every test binary links the global allocation counter (src/testing/alloc_counter.cpp)
# unless NO_ALLOC_COUNTER is given.
function(activekv_test name)
  cmake_parse_arguments(ARG "NO_ALLOC_COUNTER" "TIMEOUT;COST" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  # A test's own code is compiled at -O1 in Release: the libraries it drives keep -O3,
  # and the test sources (a third of a build's compile time) build in half the time.
  target_compile_options(${name} PRIVATE ${ACTIVEKV_WARNINGS} $<$<CONFIG:Release>:-O1>)
  set(_libs ${ARG_LIBS} GTest::gtest GTest::gtest_main Threads::Threads)
  if(NOT ARG_NO_ALLOC_COUNTER)
    list(APPEND _libs activekv_alloc_counter)
  endif()
  target_link_libraries(${name} PRIVATE ${_libs})
  # A test carrying a label in ACTIVEKV_LABELS_NOT_IN_ALL is left out of `all` (the stage that
  # skips those labels does not compile them); tests_<label> or its own name still builds it.
  foreach(label ${ARG_LABELS})
    if(label IN_LIST ACTIVEKV_LABELS_NOT_IN_ALL)
      set_target_properties(${name} PROPERTIES EXCLUDE_FROM_ALL ON)
    endif()
  endforeach()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  add_test(NAME ${name} COMMAND ${name} --gtest_brief=1)
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}")
  if(ARG_COST)
    set_tests_properties(${name} PROPERTIES COST ${ARG_COST})
  endif()
  foreach(label ${ARG_LABELS})
    set_property(GLOBAL APPEND PROPERTY ACTIVEKV_LABELS ${label})
    set_property(GLOBAL APPEND PROPERTY ACTIVEKV_TESTS_${label} ${name})
  endforeach()
endfunction()

# activekv_bench_program(target): a benchmark program (prints figures, no test runs it) is in
# `all` only with ACTIVEKV_BENCHMARKS; otherwise it is built only when named.
function(activekv_bench_program target)
  if(NOT ACTIVEKV_BENCHMARKS)
    set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL ON)
  endif()
endfunction()

# One target per test label, `tests_<label>`, building every test executable that
# carries the label: a stage that runs some labels builds exactly what it runs.
function(activekv_label_targets)
  get_property(labels GLOBAL PROPERTY ACTIVEKV_LABELS)
  list(REMOVE_DUPLICATES labels)
  foreach(label ${labels})
    get_property(tests GLOBAL PROPERTY ACTIVEKV_TESTS_${label})
    add_custom_target(tests_${label} DEPENDS ${tests})
  endforeach()
endfunction()
