// A ustar archive of one regular file: what Docker's `PUT
// /containers/{id}/archive?path=DIR` takes to put a file into a container.
// Sans-I/O: bytes in, bytes out.
//
//   absl::StatusOr<std::string> tar = TarOneFile({.name = "tool.tmp", .mode = 0700}, bytes);
//
// The archive is a 512-byte ustar header (name, mode, uid/gid, size, mtime
// 0, checksum, type '0', magic "ustar\0" version "00"), the content padded to
// 512 bytes, and two zero blocks. A name that does not fit the header's name
// field (100 bytes), or its prefix (155) + name split at a '/', is refused,
// as are names a reader would place outside the directory (absolute, "..").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tether::codec {

inline constexpr std::size_t kTarBlockBytes = 512;
inline constexpr std::size_t kTarNameBytes = 100;    // the header's name field
inline constexpr std::size_t kTarPrefixBytes = 155;  // ustar's prefix field
// The size field holds 11 octal digits: 8 GiB - 1 bytes.
inline constexpr std::uint64_t kMaxTarFileBytes = (std::uint64_t{1} << 33) - 1;
// (uid and gid fields hold 7 octal digits.)
inline constexpr std::uint32_t kMaxTarId = 07777777;

struct TarEntry {
  std::string name;  // relative: "file" or "dir/file"
  int mode = 0644;   // permission bits (<= 07777)
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
};

// The archive; kInvalidArgument (naming why) for a name that does not fit
// or escapes, a mode or id out of range, or content above kMaxTarFileBytes.
absl::StatusOr<std::string> TarOneFile(const TarEntry& entry, std::string_view content);

}  // namespace tether::codec
