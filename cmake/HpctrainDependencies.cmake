# Finds every dependency hpctrain builds against. On Debian 12 the packages installed by
# scripts/setup.sh are found without hints; on a cluster point CMake at the modules' prefixes
# (Torch_DIR, MPI_HOME or MPI_CXX_COMPILER, HDF5_ROOT, CUDAToolkit_ROOT, NCCL_ROOT): see README.md.

find_package(Torch REQUIRED)
find_package(MPI REQUIRED COMPONENTS C CXX)

set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(STATUS "hpctrain: HDF5 ${HDF5_VERSION} is serial; checkpoints use one file per rank group")
endif()

find_package(yaml-cpp REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)  # gzip-compressed IDX files (hpctrain prepare)

# xxHash ships a pkg-config file but no CMake package.
find_path(XXHASH_INCLUDE_DIR xxhash.h HINTS ENV XXHASH_ROOT PATH_SUFFIXES include)
find_library(XXHASH_LIBRARY NAMES xxhash HINTS ENV XXHASH_ROOT PATH_SUFFIXES lib lib64)
if(NOT XXHASH_INCLUDE_DIR OR NOT XXHASH_LIBRARY)
  message(FATAL_ERROR "hpctrain: xxHash not found. Install libxxhash-dev or set XXHASH_ROOT "
                      "to a prefix holding include/xxhash.h and lib/libxxhash.so")
endif()
add_library(hpctrain_xxhash INTERFACE)
target_include_directories(hpctrain_xxhash SYSTEM INTERFACE ${XXHASH_INCLUDE_DIR})
target_link_libraries(hpctrain_xxhash INTERFACE ${XXHASH_LIBRARY})

# Tokenizers (docs/DATA.md, "Tokenizers"): PCRE2 runs the split patterns (Unicode properties,
# case-insensitive groups, lookahead; JIT-compiled), ICU's common library normalizes Unicode.
# PCRE2 has a pkg-config file on Debian but no CMake package in every release: look for both.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_PCRE2 QUIET libpcre2-8)
endif()
find_path(PCRE2_INCLUDE_DIR pcre2.h HINTS ${PCRE2_ROOT} ENV PCRE2_ROOT ${PC_PCRE2_INCLUDE_DIRS}
          PATH_SUFFIXES include)
find_library(PCRE2_LIBRARY NAMES pcre2-8 HINTS ${PCRE2_ROOT} ENV PCRE2_ROOT ${PC_PCRE2_LIBRARY_DIRS}
             PATH_SUFFIXES lib lib64)
if(NOT PCRE2_INCLUDE_DIR OR NOT PCRE2_LIBRARY)
  message(FATAL_ERROR "hpctrain: PCRE2 (8-bit) not found. Install libpcre2-dev or set PCRE2_ROOT "
                      "to a prefix holding include/pcre2.h and lib/libpcre2-8.so")
endif()
add_library(hpctrain_pcre2 INTERFACE)
target_include_directories(hpctrain_pcre2 SYSTEM INTERFACE ${PCRE2_INCLUDE_DIR})
target_link_libraries(hpctrain_pcre2 INTERFACE ${PCRE2_LIBRARY})
find_package(ICU COMPONENTS uc)
if(NOT ICU_FOUND)
  message(FATAL_ERROR "hpctrain: ICU (libicuuc) not found. Install libicu-dev or set ICU_ROOT to "
                      "its prefix")
endif()

add_library(hpctrain_hdf5 INTERFACE)
target_include_directories(hpctrain_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
target_link_libraries(hpctrain_hdf5 INTERFACE ${HDF5_C_LIBRARIES} MPI::MPI_C)
# HDF5_DEFINITIONS is deliberately not applied: compile definitions that differ between targets
# would invalidate the shared precompiled header. Build facts go to build_config.hpp instead.

# NCCL: the communicator compiles wherever the CUDA toolkit and NCCL are found, GPU or not.
set(HPCTRAIN_HAVE_NCCL OFF)
if(NOT HPCTRAIN_WITH_NCCL STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  find_path(NCCL_INCLUDE_DIR nccl.h
            HINTS ${NCCL_ROOT} ENV NCCL_ROOT ENV NCCL_HOME ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY NAMES nccl
               HINTS ${NCCL_ROOT} ENV NCCL_ROOT ENV NCCL_HOME ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64)
  if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(HPCTRAIN_HAVE_NCCL ON)
    message(STATUS "hpctrain: NCCL backend ON (CUDA ${CUDAToolkit_VERSION}, ${NCCL_LIBRARY})")
  elseif(HPCTRAIN_WITH_NCCL STREQUAL "ON")
    message(FATAL_ERROR
            "hpctrain: HPCTRAIN_WITH_NCCL=ON but the CUDA toolkit or NCCL was not found "
            "(CUDA toolkit found: ${CUDAToolkit_FOUND}, nccl.h: ${NCCL_INCLUDE_DIR}, libnccl: ${NCCL_LIBRARY}). "
            "Set CUDAToolkit_ROOT to the CUDA toolkit prefix and NCCL_ROOT to the NCCL prefix, "
            "or configure with -DHPCTRAIN_WITH_NCCL=OFF.")
  else()
    message(STATUS "hpctrain: NCCL backend OFF (CUDA toolkit or NCCL not found; set CUDAToolkit_ROOT/NCCL_ROOT)")
  endif()
else()
  message(STATUS "hpctrain: NCCL backend OFF (HPCTRAIN_WITH_NCCL=OFF)")
endif()

if(HPCTRAIN_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

# LibTorch built with CUDA (a pip torch, say) exposes torch::cuda::is_available(); Debian's CPU
# build does too, returning false, so no separate switch is needed for device selection.
