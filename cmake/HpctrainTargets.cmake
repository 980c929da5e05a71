# Shared settings for every hpctrain target: warnings, sanitizers, the LibTorch precompiled
# header (one PCH reused by all targets: a LibTorch translation unit costs ~20 s without it).

add_library(hpctrain_options INTERFACE)
target_compile_options(hpctrain_options INTERFACE -Wall -Wextra -Wno-unused-parameter
                       $<$<BOOL:${HPCTRAIN_WERROR}>:-Werror>)
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

# hpctrain_layer(NAME SOURCES ... DEPS ...): one library per layer, reusing the torch PCH.
function(hpctrain_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(hpctrain_${name} STATIC ${ARG_SOURCES})
  target_link_libraries(hpctrain_${name} PUBLIC hpctrain_options ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  hpctrain_use_pch(hpctrain_${name})
endfunction()

function(hpctrain_use_pch target)
  target_link_libraries(${target} PRIVATE torch)
  target_precompile_headers(${target} REUSE_FROM hpctrain_pch)
endfunction()
