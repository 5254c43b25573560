# `cmake --install`: headers, libtether (+ tether_protocol), the CLI, and a
# package config so that an application can `find_package(tether)` and link
# tether::host. The supervisors are installed by MuslSupervisors.cmake into
# ${CMAKE_INSTALL_LIBEXECDIR}/tether, where the library finds them.
include(CMakePackageConfigHelpers)

install(TARGETS tether_protocol tether_host_core tether_host
                tether_dep_protobuf_lite tether_dep_zstd tether_dep_asio tether_dep_absl
        EXPORT tetherTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS tether RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Only the public headers (include/tether/); internals stay private.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/tether/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tether
        FILES_MATCHING PATTERN "*.h")

set(_cfgdir ${CMAKE_INSTALL_LIBDIR}/cmake/tether)
install(EXPORT tetherTargets NAMESPACE tether:: DESTINATION ${_cfgdir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tetherConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tetherConfig.cmake INSTALL_DESTINATION ${_cfgdir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tetherConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tetherConfig.cmake ${PROJECT_BINARY_DIR}/tetherConfigVersion.cmake
        DESTINATION ${_cfgdir})
