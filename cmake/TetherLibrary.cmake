# tether_library(NAME [SOURCES file...] [PUBLIC dep...] [PRIVATE dep...])
#
# One folder's library (host/CMakeLists.txt: one target per folder): the
# target tether_NAME, STATIC with SOURCES or else INTERFACE (header-only),
# its alias tether::NAME and the export name NAME (cmake/TetherInstall.cmake
# installs it as tether::NAME).
function(tether_library name)
  cmake_parse_arguments(L "" "" "SOURCES;PUBLIC;PRIVATE" ${ARGN})
  if(L_SOURCES)
    add_library(tether_${name} STATIC ${L_SOURCES})
    if(L_PUBLIC)
      target_link_libraries(tether_${name} PUBLIC ${L_PUBLIC})
    endif()
    if(L_PRIVATE)
      target_link_libraries(tether_${name} PRIVATE ${L_PRIVATE})
    endif()
  else()
    add_library(tether_${name} INTERFACE)
    target_link_libraries(tether_${name} INTERFACE ${L_PUBLIC})
  endif()
  add_library(tether::${name} ALIAS tether_${name})
  set_target_properties(tether_${name} PROPERTIES EXPORT_NAME ${name})
endfunction()
