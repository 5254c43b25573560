# `cmake --install`: headers, libtether (+ tether_protocol), the CLI, and a
# package config so that an application can `find_package(tether)` and link
# tether::host (and, in a build with the native providers, tether::native
# and tether::providers; tether_NATIVE_PROVIDERS says which). The supervisors are installed by MuslSupervisors.cmake into
# ${CMAKE_INSTALL_LIBEXECDIR}/tether, where the library finds them.
include(CMakePackageConfigHelpers)

install(TARGETS tether_protocol tether_host_base tether_host_core tether_host_support tether_host_install
                tether_host_transports tether_host_tunnel tether_host_process tether_host
                tether_dep_protobuf_lite tether_dep_zstd tether_dep_asio tether_dep_absl
        EXPORT tetherTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS tether RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# With the native providers: tether::native (every provider; the public API
# of each in include/tether/providers/<p>.h) and tether::providers (the
# registry by name, include/tether/providers.h), with what they link.
if(TETHER_NATIVE_PROVIDERS)
  set(_native_targets tether_providers tether_native tether_native_base tether_net tether_codec
      tether_native_modal_config tether_native_grpc_target tether_native_grpc)
  foreach(_p docker e2b kubernetes boat runloop daytona modal boxd)
    list(APPEND _native_targets tether_native_${_p})
    set_target_properties(tether_native_${_p} PROPERTIES EXPORT_NAME native_${_p})
  endforeach()
  set_target_properties(tether_providers PROPERTIES EXPORT_NAME providers)
  set_target_properties(tether_native PROPERTIES EXPORT_NAME native)
  set_target_properties(tether_native_base PROPERTIES EXPORT_NAME native_base)
  set_target_properties(tether_codec PROPERTIES EXPORT_NAME codec)
  set_target_properties(tether_native_modal_config PROPERTIES EXPORT_NAME native_modal_config)
  set_target_properties(tether_native_grpc_target PROPERTIES EXPORT_NAME native_grpc_target)
  set_target_properties(tether_native_grpc PROPERTIES EXPORT_NAME native_grpc)
  install(TARGETS ${_native_targets} EXPORT tetherTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

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
