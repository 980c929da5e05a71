# Shared settings for every hpctrain target: warnings, sanitizers, the LibTorch precompiled
# header (one PCH reused by all targets: a LibTorch translation unit costs ~20 s without it) and
# unity batches of the LibTorch layers.

add_library(hpctrain_options INTERFACE)
target_compile_options(hpctrain_options INTERFACE -Wall -Wextra -Wno-unused-parameter
                       $<$<BOOL:${HPCTRAIN_WERROR}>:-Werror>)
# GCC 13 and later report -Warray-bounds inside LibTorch's torch::autograd::Function::apply (the
# std::vector<bool>::reserve it inlines; a false positive of the inliner, seen with GCC 14 and
# LibTorch 2.6 on Debian 13): a warning there, not an error.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 13)
  target_compile_options(hpctrain_options INTERFACE -Wno-error=array-bounds)
endif()
# Build facts live in a generated header, not in -D flags, so that every target compiles with the
# same flags and can reuse the one precompiled header.
set(HPCTRAIN_HDF5_PARALLEL ${HDF5_IS_PARALLEL})
configure_file(${PROJECT_SOURCE_DIR}/cmake/build_config.hpp.in
               ${PROJECT_BINARY_DIR}/generated/hpctrain/build_config.hpp @ONLY)
target_include_directories(hpctrain_options INTERFACE ${PROJECT_SOURCE_DIR}/include
                           ${PROJECT_BINARY_DIR}/generated)
# C API only: keep OpenMPI's and MPICH's deprecated C++ bindings out of every translation unit.
target_compile_definitions(hpctrain_options INTERFACE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
if(HPCTRAIN_SANITIZE)
  target_compile_options(hpctrain_options INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer)
  target_link_options(hpctrain_options INTERFACE -fsanitize=address,undefined)
endif()

# The PCH carrier: a tiny object library whose precompiled header every torch-using target reuses.
add_library(hpctrain_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch.cpp)
target_link_libraries(hpctrain_pch PUBLIC hpctrain_options torch)
target_precompile_headers(hpctrain_pch PRIVATE <torch/torch.h>)

# Unity batches. Even with the PCH, every translation unit that sees <torch/torch.h> pays about
# 15 CPU-seconds before its first line of code: GCC instantiates, at the end of each unit, every
# template that LibTorch's inline functions use (the PCH stores them as pending, not done). An
# empty file costs that much. Compiling a layer's sources HPCTRAIN_UNITY_BATCH_SIZE at a time in one
# unit pays it once per batch (docs/BENCHMARKS.md, "Build time"). Sources stay globbed: a new file
# joins a batch by its name's order. The price: names with internal linkage (anonymous namespaces,
# `static`) must be unique within a layer, which the unity_names test checks on the sources.
option(HPCTRAIN_UNITY_BUILD "Compile the LibTorch layers' sources in unity batches (faster clean builds)" ON)
set(HPCTRAIN_UNITY_BATCH_SIZE 8 CACHE STRING "Sources per unity batch (HPCTRAIN_UNITY_BUILD)")

# hpctrain_unity(TARGET): compile TARGET's sources in unity batches when HPCTRAIN_UNITY_BUILD is on.
# The target is recorded either way for the unity_names test (hpctrain_unity_sources_args).
function(hpctrain_unity target)
  set_property(GLOBAL APPEND PROPERTY HPCTRAIN_UNITY_TARGETS ${target})
  if(HPCTRAIN_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE BATCH
                                               UNITY_BUILD_BATCH_SIZE ${HPCTRAIN_UNITY_BATCH_SIZE})
  endif()
endfunction()

# hpctrain_unity_sources_args(VAR): "--target NAME FILE..." for every target hpctrain_unity was given
# so far, its sources as absolute paths.
function(hpctrain_unity_sources_args var)
  get_property(targets GLOBAL PROPERTY HPCTRAIN_UNITY_TARGETS)
  set(args)
  foreach(target ${targets})
    get_target_property(sources ${target} SOURCES)
    get_target_property(dir ${target} SOURCE_DIR)
    list(APPEND args --target ${target})
    foreach(source ${sources})
      get_filename_component(path ${source} ABSOLUTE BASE_DIR ${dir})
      list(APPEND args ${path})
    endforeach()
  endforeach()
  set(${var} ${args} PARENT_SCOPE)
endfunction()

# hpctrain_layer(NAME SOURCES ... DEPS ... [NO_TORCH_PCH]): one library per layer, reusing the
# torch PCH and compiled in unity batches. NO_TORCH_PCH: a layer whose sources include no LibTorch
# header (runtime, report): each file compiles in a second or two without the PCH, so neither the
# PCH nor batches pay; a file there that needs LibTorch includes the narrow headers it uses.
function(hpctrain_layer name)
  cmake_parse_arguments(ARG "NO_TORCH_PCH" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(hpctrain_${name} STATIC ${ARG_SOURCES})
  target_link_libraries(hpctrain_${name} PUBLIC hpctrain_options ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  if(NOT ARG_NO_TORCH_PCH)
    hpctrain_use_pch(hpctrain_${name})
    hpctrain_unity(hpctrain_${name})
  endif()
endfunction()

function(hpctrain_use_pch target)
  target_link_libraries(${target} PRIVATE torch)
  target_precompile_headers(${target} REUSE_FROM hpctrain_pch)
endfunction()
