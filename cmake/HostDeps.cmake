# Dependencies of the host build, from Debian's packages. Everything is
# exposed as tether_dep::* so that protocol/ and supervisor/ link the same
# names in the host build and in the musl sub-build (MuslDeps.cmake).
find_package(Protobuf 3.21 REQUIRED)
find_package(absl REQUIRED)
find_package(Threads REQUIRED)
find_package(Boost 1.81 REQUIRED COMPONENTS json)
find_package(zstd 1.5 REQUIRED CONFIG)

add_library(tether_dep_protobuf_lite INTERFACE)
target_link_libraries(tether_dep_protobuf_lite INTERFACE protobuf::libprotobuf-lite)
add_library(tether_dep::protobuf_lite ALIAS tether_dep_protobuf_lite)

add_library(tether_dep_zstd INTERFACE)
target_link_libraries(tether_dep_zstd INTERFACE zstd::libzstd_shared)
add_library(tether_dep::zstd ALIAS tether_dep_zstd)

add_library(tether_dep_asio INTERFACE)
target_link_libraries(tether_dep_asio INTERFACE Boost::headers Threads::Threads)
target_compile_definitions(tether_dep_asio INTERFACE BOOST_ASIO_NO_DEPRECATED)
add_library(tether_dep::asio ALIAS tether_dep_asio)

# protoc from Debian (3.21.12) serves both builds: the musl protobuf-lite is
# built from the same Debian source version.
set(TETHER_PROTOC "$<TARGET_FILE:protobuf::protoc>")

add_library(tether_dep_absl INTERFACE)
target_link_libraries(tether_dep_absl INTERFACE absl::status absl::statusor absl::strings)
add_library(tether_dep::absl ALIAS tether_dep_absl)
