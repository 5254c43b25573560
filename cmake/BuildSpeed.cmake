# How the host build stays fast on two cores (issue 29). Nothing here changes
# what is compiled or checked; only how long it takes:
#
#   TETHER_CCACHE  compile through ccache when it is installed. Its cache is
#                  ${TETHER_CACHE_DIR}/ccache (outside the clone, shared by
#                  every clone and preset on the machine, safe to delete);
#                  paths are made relative to the source tree, so that a
#                  second clone can hit on what it did not change (a run
#                  ~45 commits after another: 35% of its calls hit).
#   TETHER_PCH     GCC only: each target of three or more C++ sources
#                  includes a precompiled set of the headers nearly every host
#                  file includes (Asio's coroutine headers, abseil's Status,
#                  the standard containers; Boost.JSON where the target links
#                  it). Parsing them was a third of a typical translation
#                  unit's time (4.9 of 15.3 s for host/native/e2b/e2b_channel.cc).
#                  The set is compiled four times, not once per target: for
#                  libraries (-fPIC) and executables (-fPIE), each with and
#                  without Boost.JSON (targets tether_pch_{lib,exe}[_json]);
#                  every other target reuses one of them (REUSE_FROM). A .gch
#                  is 155-185 MB: one per target came to 4.1 GB of a 5.3 GB
#                  release tree and of a 10 GB ASan tree, and a CI machine ran
#                  out of disk in the ASan link (stop 44). GCC uses a .gch only
#                  where the flags and the macros its headers read match, so
#                  the targets that use one are given the two that varied
#                  (-pthread, BOOST_ASIO_NO_DEPRECATED); a file that would
#                  not use its .gch (another flag or macro: GCC then parses
#                  the headers itself, silently) fails to compile
#                  (-Werror=invalid-pch), naming the flag.
#   TETHER_FAST_LINKER  link with mold when the compiler accepts it (Debian's
#                  mold; setup.sh installs it), else lld, else the default.
#
# tether_build_speed() applies the last two to every target defined so far;
# the top-level CMakeLists.txt calls it once, at its end. The musl supervisor
# sub-builds (Zig, TETHER_SUPERVISOR_ONLY) use ccache only: each of them
# compiled from nothing in every new clone (2 and 2.3 min of a warm
# release build, issue 29); their missing-include errors are the ones a
# precompiled header would hide. Their compiler is setup.sh's wrapper
# script around Zig, so ccache checks its content (which names Zig's
# version and the target), not its mtime (setup.sh may write it again).
option(TETHER_CCACHE "Compile through ccache when it is installed" ON)
option(TETHER_PCH "Precompile the common headers per target (GCC)" ON)
option(TETHER_FAST_LINKER "Link with mold or lld when available" ON)

find_program(TETHER_CCACHE_PROGRAM ccache)
if(TETHER_CCACHE AND TETHER_CCACHE_PROGRAM)
  # base_dir + no hashed cwd: the same file in another clone is the same
  # entry. The sloppiness is what ccache needs to cache with a precompiled
  # header at all (its documented set for GCC's -include + .gch).
  set(_tether_ccache
      "${CMAKE_COMMAND}" -E env
      "CCACHE_DIR=${TETHER_CACHE_DIR}/ccache"
      "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}"
      CCACHE_NOHASHDIR=1
      CCACHE_MAXSIZE=8G
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime")
  if(TETHER_SUPERVISOR_ONLY)
    list(APPEND _tether_ccache CCACHE_COMPILERCHECK=content)
  endif()
  list(APPEND _tether_ccache "${TETHER_CCACHE_PROGRAM}")
  set(CMAKE_C_COMPILER_LAUNCHER ${_tether_ccache})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${_tether_ccache})
  unset(_tether_ccache)
endif()

if(TETHER_FAST_LINKER AND NOT TETHER_SUPERVISOR_ONLY)
  include(CheckCXXSourceCompiles)
  foreach(_linker mold lld)
    set(CMAKE_REQUIRED_LINK_OPTIONS "-fuse-ld=${_linker}")
    check_cxx_source_compiles("int main() { return 0; }" TETHER_LINKER_${_linker})
    unset(CMAKE_REQUIRED_LINK_OPTIONS)
    if(TETHER_LINKER_${_linker})
      add_link_options("-fuse-ld=${_linker}")
      break()
    endif()
  endforeach()
endif()

# The precompiled set: headers that most host, test and provider files
# include (counted with grep when this was written), none of ours.
set(_tether_pch_headers
  <algorithm> <array> <chrono> <cstdint> <cstring> <filesystem> <functional>
  <memory> <optional> <span> <string> <string_view> <utility> <vector>
  <boost/asio/any_io_executor.hpp> <boost/asio/as_tuple.hpp>
  <boost/asio/awaitable.hpp> <boost/asio/co_spawn.hpp> <boost/asio/detached.hpp>
  <boost/asio/experimental/awaitable_operators.hpp> <boost/asio/io_context.hpp>
  <boost/asio/post.hpp> <boost/asio/steady_timer.hpp> <boost/asio/this_coro.hpp>
  <boost/asio/use_awaitable.hpp>
  <absl/status/status.h> <absl/status/statusor.h> <absl/strings/str_cat.h>)

# Every target in directory $dir and below, into the list named $out.
function(_tether_targets_below dir out)
  get_property(_targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(_subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(_sub IN LISTS _subdirs)
    _tether_targets_below("${_sub}" _more)
    list(APPEND _targets ${_more})
  endforeach()
  set(${out} ${_targets} PARENT_SCOPE)
endfunction()

# One holder of the precompiled set: an object library of one empty source,
# compiled with the flags its users have. $pic: ON for libraries, OFF for
# executables (-fPIE); $json: also <boost/json.hpp>.
function(_tether_pch_holder name pic json)
  set(_src "${PROJECT_BINARY_DIR}/tether_pch/${name}.cc")
  if(NOT EXISTS "${_src}")
    file(WRITE "${_src}" "// The precompiled headers' holder (cmake/BuildSpeed.cmake).\n")
  endif()
  add_library(${name} OBJECT "${_src}")
  target_link_libraries(${name} PRIVATE tether_dep::asio tether_dep::absl)
  target_compile_options(${name} PRIVATE -pthread)
  set(_headers ${_tether_pch_headers})
  if(json)
    target_link_libraries(${name} PRIVATE Boost::json)
    list(APPEND _headers <boost/json.hpp>)
  endif()
  if(pic)
    set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  else()
    set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${name} PRIVATE -fPIE)
  endif()
  target_precompile_headers(${name} PRIVATE ${_headers})
endfunction()

function(tether_build_speed)
  if(NOT TETHER_PCH OR NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    return()
  endif()
  _tether_targets_below("${PROJECT_SOURCE_DIR}" _targets)
  set(_count 0)
  foreach(_t IN LISTS _targets)
    get_target_property(_type ${_t} TYPE)
    if(NOT _type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$")
      continue()
    endif()
    get_target_property(_imported ${_t} IMPORTED)
    if(_imported)
      continue()
    endif()
    get_target_property(_sources ${_t} SOURCES)
    set(_c_sources ${_sources})
    list(FILTER _c_sources INCLUDE REGEX "\\.c$")
    list(FILTER _sources INCLUDE REGEX "\\.(cc|cpp|cxx)$")
    list(LENGTH _sources _n)
    get_target_property(_dir ${_t} SOURCE_DIR)
    if(_n LESS 3 OR _c_sources OR _dir MATCHES "/fuzz$|/host/base$")
      # The header compile (~5 s) would cost what it saves: small targets,
      # the fuzzers and host/base/ (sans-I/O: no Asio). C++ only.
      continue()
    endif()
    if(_type STREQUAL "EXECUTABLE")
      set(_holder tether_pch_exe)
      set(_pic OFF)
    else()
      set(_holder tether_pch_lib)
      set(_pic ON)
    endif()
    set(_json OFF)
    get_target_property(_libs ${_t} LINK_LIBRARIES)
    if(_libs AND "Boost::json" IN_LIST _libs)
      string(APPEND _holder _json)
      set(_json ON)
    endif()
    if(NOT TARGET ${_holder})
      _tether_pch_holder(${_holder} ${_pic} ${_json})
    endif()
    # What the holder was compiled with and its headers read; a file that
    # would parse the headers itself (a flag or macro that differs) fails.
    target_compile_options(${_t} PRIVATE -pthread -Werror=invalid-pch)
    target_compile_definitions(${_t} PRIVATE BOOST_ASIO_NO_DEPRECATED)
    target_precompile_headers(${_t} REUSE_FROM ${_holder})
    math(EXPR _count "${_count} + 1")
  endforeach()
  message(STATUS "tether: ${_count} targets share the precompiled headers")
endfunction()
