# Builds the stripped static tether-supervisor for each musl target as a
# sub-build of this same source tree (TETHER_SUPERVISOR_ONLY=ON, the
# toolchain and dependencies from packaging/setup.sh), and copies the results
# to ${TETHER_SUPERVISOR_BIN_DIR}/tether-supervisor-<arch>.
#
# The sub-builds live in TETHER_MUSL_BUILD_ROOT, shared by every preset, and
# run on every build (BUILD_ALWAYS): Ninja's own no-op check is cheap, and it
# is what notices edits in protocol/ and supervisor/.
include(ExternalProject)

set(TETHER_MUSL_ARCHES "x86_64;aarch64" CACHE STRING
    "Architectures of the static supervisors to build and embed (x86_64, aarch64); ./dev run's first build makes only the host's")
foreach(_arch IN LISTS TETHER_MUSL_ARCHES)
  if(NOT _arch MATCHES "^(x86_64|aarch64)$")
    message(FATAL_ERROR "TETHER_MUSL_ARCHES: '${_arch}' is not x86_64 or aarch64")
  endif()
endforeach()
set(TETHER_MUSL_BUILD_ROOT "${PROJECT_SOURCE_DIR}/build/musl" CACHE PATH
    "Build trees of the static musl supervisors, shared by all presets")
set(TETHER_SUPERVISOR_BIN_DIR "${CMAKE_BINARY_DIR}/supervisors")
set_property(GLOBAL PROPERTY TETHER_SUPERVISOR_BIN_DIR "${TETHER_SUPERVISOR_BIN_DIR}")

foreach(_arch IN LISTS TETHER_MUSL_ARCHES)
  set(_toolchain "${TETHER_CACHE_DIR}/toolchain/${_arch}-linux-musl/toolchain.cmake")
  if(NOT EXISTS "${_toolchain}")
    message(FATAL_ERROR
      "No musl toolchain at ${_toolchain}.\n"
      "Run  TETHER_CACHE_DIR=${TETHER_CACHE_DIR} ${PROJECT_SOURCE_DIR}/packaging/setup.sh\n"
      "(it installs Zig and builds the musl dependencies into that cache), "
      "or configure with -DTETHER_MUSL_SUPERVISORS=OFF.")
  endif()
endforeach()

find_program(TETHER_NINJA_EXECUTABLE ninja REQUIRED)

set(_tether_supervisor_targets "")
set(_tether_supervisor_bins "")
foreach(_arch IN LISTS TETHER_MUSL_ARCHES)
  set(_target "${_arch}-linux-musl")
  set(_bin "${TETHER_SUPERVISOR_BIN_DIR}/tether-supervisor-${_arch}")
  ExternalProject_Add(tether_supervisor_${_arch}
    SOURCE_DIR "${PROJECT_SOURCE_DIR}"
    BINARY_DIR "${TETHER_MUSL_BUILD_ROOT}/${_arch}"
    CMAKE_GENERATOR Ninja
    CMAKE_ARGS
      "-DCMAKE_TOOLCHAIN_FILE=${TETHER_CACHE_DIR}/toolchain/${_target}/toolchain.cmake"
      "-DCMAKE_MAKE_PROGRAM=${TETHER_NINJA_EXECUTABLE}"
      -DTETHER_SUPERVISOR_ONLY=ON
      -DCMAKE_BUILD_TYPE=MinSizeRel
      "-DTETHER_MUSL_PREFIX=${TETHER_CACHE_DIR}/musl/${_target}"
      "-DTETHER_MUSL_BOOST_INCLUDE=${TETHER_CACHE_DIR}/musl/boost-include"
      "-DTETHER_CACHE_DIR=${TETHER_CACHE_DIR}"
      "-DTETHER_CCACHE=${TETHER_CCACHE}"
      -DTETHER_TESTS=OFF
    # Linked with -s (MuslDeps.cmake), so a plain copy is already stripped;
    # copy_if_different keeps the mtime when nothing changed. The copy is a
    # declared byproduct of the build step, so that whatever depends on the
    # binary (the embedded copy in libtether) is rebuilt in the same run.
    # Its ninja tags its progress lines ("[x86_64 12/40] ...") so that a
    # reader of the log (./dev run's status line) tells them apart.
    BUILD_COMMAND "${CMAKE_COMMAND}" -E env "NINJA_STATUS=[${_arch} %f/%t] "
                  "${CMAKE_COMMAND}" --build <BINARY_DIR> --target tether-supervisor
      COMMAND "${CMAKE_COMMAND}" -E make_directory "${TETHER_SUPERVISOR_BIN_DIR}"
      COMMAND "${CMAKE_COMMAND}" -E copy_if_different
              <BINARY_DIR>/supervisor/tether-supervisor "${_bin}"
    BUILD_BYPRODUCTS "${_bin}"
    BUILD_ALWAYS ON
    INSTALL_COMMAND ""
    # The console pool runs one sub-build at a time (each one already uses
    # every core) and shows its progress.
    USES_TERMINAL_CONFIGURE ON
    USES_TERMINAL_BUILD ON)
  list(APPEND _tether_supervisor_targets tether_supervisor_${_arch})
  list(APPEND _tether_supervisor_bins "${_bin}")
endforeach()

add_custom_target(tether_supervisors DEPENDS ${_tether_supervisor_targets})

install(PROGRAMS ${_tether_supervisor_bins}
        DESTINATION "${CMAKE_INSTALL_LIBEXECDIR}/tether")

# The host library carries both supervisors (.incbin), so an application that
# embeds it needs no other files. $TETHER_SUPERVISOR_DIR still overrides.
# An architecture not built gets empty symbols: the library then looks for
# that binary on disk (TETHER_SUPERVISOR_DIR, beside the executable).
set(_asm "")
foreach(_arch IN ITEMS x86_64 aarch64)
  set(_incbin "")
  if(_arch IN_LIST TETHER_MUSL_ARCHES)
    set(_incbin "  .incbin \"${TETHER_SUPERVISOR_BIN_DIR}/tether-supervisor-${_arch}\"\n")
  endif()
  string(APPEND _asm
    "  .section .rodata.tether_supervisor_${_arch},\"a\"\n"
    "  .balign 16\n"
    "  .globl tether_supervisor_${_arch}_begin\n"
    "tether_supervisor_${_arch}_begin:\n"
    "${_incbin}"
    "  .globl tether_supervisor_${_arch}_end\n"
    "tether_supervisor_${_arch}_end:\n")
endforeach()
string(APPEND _asm "  .section .note.GNU-stack,\"\",@progbits\n")
set(_emb "${CMAKE_BINARY_DIR}/host/embedded_supervisors.S")
file(CONFIGURE OUTPUT "${_emb}" CONTENT "${_asm}" @ONLY)
target_sources(tether_host_install PRIVATE "${_emb}")
# Only this object waits for the supervisors (their copies are byproducts of
# the sub-builds' build steps): the rest of host/ compiles meanwhile.
set_source_files_properties("${_emb}" TARGET_DIRECTORY tether_host_install
                            PROPERTIES OBJECT_DEPENDS "${_tether_supervisor_bins}")
target_compile_definitions(tether_host_install PRIVATE TETHER_EMBEDDED_SUPERVISORS=1)
