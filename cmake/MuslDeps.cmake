# Dependencies of the static musl supervisor build (TETHER_SUPERVISOR_ONLY=ON
# with a toolchain file from packaging/setup.sh). Defines the same
# tether_dep::* targets and TETHER_PROTOC as HostDeps.cmake, from the musl
# prefix that setup.sh builds: zstd, protobuf-lite and abseil from Debian's
# sources; Boost headers through a folder holding only a `boost` link (never
# all of /usr/include); protoc from the host.
if(NOT CMAKE_CROSSCOMPILING)
  message(FATAL_ERROR
    "TETHER_SUPERVISOR_ONLY=ON needs a musl toolchain file: configure with "
    "-DCMAKE_TOOLCHAIN_FILE=<cache>/toolchain/<arch>-linux-musl/toolchain.cmake "
    "(run packaging/setup.sh first). The host build leaves it OFF.")
endif()

set(TETHER_MUSL_PREFIX "${CMAKE_FIND_ROOT_PATH}" CACHE PATH
    "Install prefix of the musl dependencies (<cache>/musl/<target>)")
set(TETHER_MUSL_BOOST_INCLUDE "${TETHER_MUSL_PREFIX}/../boost-include" CACHE PATH
    "Folder holding only a `boost` link to the host's Boost headers")
if(NOT EXISTS "${TETHER_MUSL_PREFIX}/lib/cmake/protobuf"
   OR NOT EXISTS "${TETHER_MUSL_BOOST_INCLUDE}/boost/asio.hpp")
  message(FATAL_ERROR
    "musl dependencies missing under ${TETHER_MUSL_PREFIX}: run packaging/setup.sh")
endif()
# Searched through the toolchain's root path, so only the prefix is seen.
list(PREPEND CMAKE_PREFIX_PATH "${TETHER_MUSL_PREFIX}")
list(PREPEND CMAKE_FIND_ROOT_PATH "${TETHER_MUSL_PREFIX}")

find_package(protobuf 3.21 REQUIRED CONFIG)
find_package(absl REQUIRED CONFIG)
find_package(zstd 1.5 REQUIRED CONFIG)
find_package(Threads REQUIRED)

add_library(tether_dep_protobuf_lite INTERFACE)
target_link_libraries(tether_dep_protobuf_lite INTERFACE protobuf::libprotobuf-lite)
add_library(tether_dep::protobuf_lite ALIAS tether_dep_protobuf_lite)

add_library(tether_dep_zstd INTERFACE)
target_link_libraries(tether_dep_zstd INTERFACE zstd::libzstd_static)
add_library(tether_dep::zstd ALIAS tether_dep_zstd)

add_library(tether_dep_asio INTERFACE)
target_include_directories(tether_dep_asio SYSTEM INTERFACE "${TETHER_MUSL_BOOST_INCLUDE}")
target_link_libraries(tether_dep_asio INTERFACE Threads::Threads)
target_compile_definitions(tether_dep_asio INTERFACE BOOST_ASIO_NO_DEPRECATED)
add_library(tether_dep::asio ALIAS tether_dep_asio)

add_library(tether_dep_absl INTERFACE)
target_link_libraries(tether_dep_absl INTERFACE absl::status absl::statusor absl::strings)
add_library(tether_dep::absl ALIAS tether_dep_absl)

# The host's protoc: the musl protobuf-lite is built from the same Debian
# source version, and generated code only compiles against its own runtime.
find_program(TETHER_PROTOC_EXECUTABLE protoc NO_CMAKE_FIND_ROOT_PATH REQUIRED)
execute_process(COMMAND "${TETHER_PROTOC_EXECUTABLE}" --version
                OUTPUT_VARIABLE _tether_protoc_version OUTPUT_STRIP_TRAILING_WHITESPACE)
string(REGEX REPLACE "^libprotoc " "" _tether_protoc_version "${_tether_protoc_version}")
if(NOT _tether_protoc_version VERSION_EQUAL protobuf_VERSION)
  message(FATAL_ERROR "${TETHER_PROTOC_EXECUTABLE} is ${_tether_protoc_version}, "
                      "but the musl protobuf-lite is ${protobuf_VERSION}")
endif()
set(TETHER_PROTOC "${TETHER_PROTOC_EXECUTABLE}")

# Fully static, stripped executables; unused sections (the dependencies are
# built with -ffunction-sections -fdata-sections) are dropped.
string(APPEND CMAKE_EXE_LINKER_FLAGS " -static -s -Wl,--gc-sections")
