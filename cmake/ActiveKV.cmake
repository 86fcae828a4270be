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

# The optimisation of drivers' own code: tests and command-line programs, not the libraries they
# drive. Unset, a test's code builds at -O1 in Release (the libraries keep -O3) and programs keep
# the build type's level. The sanitizer presets set ACTIVEKV_DRIVER_OPT=-O0: under ASan and UBSan a
# GoogleTest or CLI11 translation unit compiles about three times faster at -O0 than at -O1, and
# the time a test runs is spent in the libraries, which keep the preset's -O1 (docs/TESTING.md).
set(ACTIVEKV_DRIVER_OPT "" CACHE STRING "Optimisation flag for tests' and programs' own code, e.g. -O0 (sanitizer presets)")
function(activekv_driver_options target)
  if(ACTIVEKV_DRIVER_OPT)
    target_compile_options(${target} PRIVATE ${ACTIVEKV_DRIVER_OPT})
  endif()
endfunction()
# Library sources that parse or format text (JSON, reports, plans, HTTP) and sit on no hot path:
# under the sanitizer presets they compile at ACTIVEKV_DRIVER_OPT like the drivers, since there the
# optimiser is most of a JSON-heavy file's cost (serve/run_report.cpp under ASan + UBSan: 17 user s
# at -O1, 9 at -O0). Elsewhere nothing changes. Call it in the directory that adds the library.
function(activekv_formatting_sources)
  if(ACTIVEKV_DRIVER_OPT)
    set_source_files_properties(${ARGN} PROPERTIES COMPILE_OPTIONS ${ACTIVEKV_DRIVER_OPT})
  endif()
endfunction()
function(_activekv_test_opt target)
  if(ACTIVEKV_DRIVER_OPT)
    activekv_driver_options(${target})
  else()
    target_compile_options(${target} PRIVATE $<$<CONFIG:Release>:-O1>)
  endif()
endfunction()

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
# The headers every test shares, parsed once per build tree into one precompiled header that
# each test reuses (REUSE_FROM): GoogleTest, fmt and nlohmann/json cost a test about 3 s of
# parsing each, 80 tests and three build trees in the test command.
function(_activekv_test_pch)
  if(TARGET activekv_test_pch)
    return()
  endif()
  add_library(activekv_test_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch.cpp)
  target_compile_options(activekv_test_pch PRIVATE ${ACTIVEKV_WARNINGS})
  _activekv_test_opt(activekv_test_pch)
  target_link_libraries(activekv_test_pch PRIVATE GTest::gtest fmt::fmt nlohmann_json::nlohmann_json Threads::Threads)
  target_precompile_headers(activekv_test_pch PRIVATE
    <gtest/gtest.h> <fmt/format.h> <nlohmann/json.hpp>
    <algorithm> <array> <chrono> <cmath> <cstdint> <cstring> <functional> <map> <memory>
    <mutex> <optional> <random> <span> <string> <string_view> <thread> <utility> <vector>)
endfunction()

# activekv_program_pch(target): a command-line program's sources reuse one precompiled header of
# CLI11, nlohmann/json and fmt, which cost each of them several seconds of parsing.
function(activekv_program_pch target)
  if(NOT TARGET activekv_program_pch)
    add_library(activekv_program_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch.cpp)
    target_compile_options(activekv_program_pch PRIVATE ${ACTIVEKV_WARNINGS})
    activekv_driver_options(activekv_program_pch)
    target_link_libraries(activekv_program_pch PRIVATE CLI11::CLI11 nlohmann_json::nlohmann_json fmt::fmt)
    target_precompile_headers(activekv_program_pch PRIVATE
      <CLI/CLI.hpp> <nlohmann/json.hpp> <fmt/format.h> <memory> <string> <vector>)
  endif()
  target_precompile_headers(${target} REUSE_FROM activekv_program_pch)
  activekv_driver_options(${target})
endfunction()

function(activekv_test name)
  cmake_parse_arguments(ARG "NO_ALLOC_COUNTER" "TIMEOUT;COST" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  # A test's own code is compiled at -O1 in Release (-O0 in the sanitizer presets): the libraries
  # it drives keep their level, and the test sources build in half the time or less.
  target_compile_options(${name} PRIVATE ${ACTIVEKV_WARNINGS})
  _activekv_test_opt(${name})
  _activekv_test_pch()
  target_precompile_headers(${name} REUSE_FROM activekv_test_pch)
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
  set_property(GLOBAL APPEND PROPERTY ACTIVEKV_TEST_TARGETS ${name})
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
  # `programs`: everything `all` builds except the test executables (libraries, the CLI, tools,
  # benchmarks where enabled). The test command's release stage builds programs plus the tests
  # it runs there (scripts/test.sh).
  get_property(test_targets GLOBAL PROPERTY ACTIVEKV_TEST_TARGETS)
  _activekv_targets_below(${PROJECT_SOURCE_DIR} every)
  set(programs)
  foreach(t ${every})
    get_target_property(type ${t} TYPE)
    get_target_property(excluded ${t} EXCLUDE_FROM_ALL)
    if(t IN_LIST test_targets OR t MATCHES "^activekv_(test|program)_pch$" OR excluded OR type STREQUAL "INTERFACE_LIBRARY"
       OR type STREQUAL "UTILITY")
      continue()
    endif()
    list(APPEND programs ${t})
  endforeach()
  add_custom_target(programs DEPENDS ${programs})
endfunction()

function(_activekv_targets_below dir out)
  get_property(found DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    _activekv_targets_below(${sub} below)
    list(APPEND found ${below})
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()
