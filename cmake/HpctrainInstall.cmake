# `cmake --install BUILD [--prefix P]`: the hpctrain executable, the layer libraries, the public
# headers and a CMake package, so models can be built out of tree:
#
#   find_package(hpctrain REQUIRED)            # CMAKE_PREFIX_PATH=P
#   add_library(my_models SHARED my_model.cpp)
#   target_link_libraries(my_models PRIVATE hpctrain::plugin)
#
# and loaded with `hpctrain --plugin libmy_models.so ...` (docs/MODELS.md). The package's targets:
#   hpctrain::plugin      headers + LibTorch + yaml-cpp, for a plugin: hpctrain's own symbols stay
#                         undefined and resolve against the executable that loads the plugin
#   hpctrain::<layer>     the static layer libraries (runtime, comm, data, parallel, model,
#                         checkpoint, eval, train), for programs that embed hpctrain
#   hpctrain_EXECUTABLE   the installed hpctrain
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(HPCTRAIN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/hpctrain)
set(_hpctrain_layers runtime comm data parallel model checkpoint eval train report)

install(TARGETS hpctrain RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(layer ${_hpctrain_layers})
  install(FILES $<TARGET_FILE:hpctrain_${layer}> DESTINATION ${CMAKE_INSTALL_LIBDIR})
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/hpctrain DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/generated/hpctrain/build_config.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hpctrain)

set(HPCTRAIN_PACKAGE_LAYERS ${_hpctrain_layers})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hpctrainConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/hpctrainConfig.cmake
                              INSTALL_DESTINATION ${HPCTRAIN_INSTALL_CMAKEDIR}
                              PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR
                                        CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hpctrainConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/hpctrainConfig.cmake
              ${PROJECT_BINARY_DIR}/hpctrainConfigVersion.cmake
        DESTINATION ${HPCTRAIN_INSTALL_CMAKEDIR})
