#include "host/codec/tar.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tether::codec {
namespace {

// Writes `value` as `width - 1` octal digits and a NUL into field[0..width).
void Octal(char* field, std::size_t width, std::uint64_t value) {
  field[width - 1] = '\0';
  for (std::size_t i = width - 1; i-- > 0;) {
    field[i] = static_cast<char>('0' + (value & 7));
    value >>= 3;
  }
}

absl::Status CheckName(std::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("tar: empty file name");
  if (name.front() == '/') return absl::InvalidArgumentError(absl::StrCat("tar: '", std::string(name), "' is absolute"));
  if (name.find('\0') != std::string_view::npos) return absl::InvalidArgumentError("tar: a NUL in the file name");
  if (name.back() == '/') return absl::InvalidArgumentError(absl::StrCat("tar: '", std::string(name), "' names a directory"));
  for (absl::string_view part : absl::StrSplit(absl::string_view(name.data(), name.size()), '/')) {
    if (part == "..") return absl::InvalidArgumentError(absl::StrCat("tar: '", std::string(name), "' climbs out with .."));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> TarOneFile(const TarEntry& e, std::string_view content) {
  if (absl::Status st = CheckName(e.name); !st.ok()) return st;
  if (e.mode < 0 || e.mode > 07777) return absl::InvalidArgumentError(absl::StrCat("tar: mode ", e.mode, " out of range"));
  if (e.uid > kMaxTarId || e.gid > kMaxTarId) return absl::InvalidArgumentError("tar: uid or gid above 07777777");
  if (content.size() > kMaxTarFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("tar: ", content.size(), " bytes do not fit a ustar size field"));
  }
  // The name field, or prefix '/' name split at the last '/' that fits both.
  std::string_view prefix, name = e.name;
  if (name.size() > kTarNameBytes) {
    bool split = false;
    for (std::size_t slash = name.rfind('/'); slash != std::string_view::npos && slash > 0;
         slash = name.rfind('/', slash - 1)) {
      if (slash <= kTarPrefixBytes && name.size() - slash - 1 <= kTarNameBytes) {
        prefix = name.substr(0, slash);
        name = name.substr(slash + 1);
        split = true;
        break;
      }
      if (slash == 0) break;
    }
    if (!split) {
      return absl::InvalidArgumentError(absl::StrCat("tar: the name '", e.name.substr(0, 64), "...' (", e.name.size(),
                                                     " bytes) does not fit a ustar header"));
    }
  }
  const std::size_t padded = (content.size() + kTarBlockBytes - 1) / kTarBlockBytes * kTarBlockBytes;
  std::string out;
  out.reserve(kTarBlockBytes + padded + 2 * kTarBlockBytes);
  out.resize(kTarBlockBytes, '\0');
  char* h = out.data();
  // (memcpy from an empty view's null data() is undefined, even for 0 bytes)
  if (!name.empty()) std::memcpy(h + 0, name.data(), name.size());
  Octal(h + 100, 8, static_cast<std::uint64_t>(e.mode));
  Octal(h + 108, 8, e.uid);
  Octal(h + 116, 8, e.gid);
  Octal(h + 124, 12, content.size());
  Octal(h + 136, 12, 0);  // mtime
  std::memset(h + 148, ' ', 8);  // the checksum counts its own field as spaces
  h[156] = '0';                  // a regular file
  std::memcpy(h + 257, "ustar", 6);
  std::memcpy(h + 263, "00", 2);
  if (!prefix.empty()) std::memcpy(h + 345, prefix.data(), prefix.size());
  unsigned sum = 0;
  for (std::size_t i = 0; i < kTarBlockBytes; ++i) sum += static_cast<unsigned char>(h[i]);
  Octal(h + 148, 7, sum);  // six digits, NUL, and the space kept from above
  out.append(content);
  out.resize(kTarBlockBytes + padded + 2 * kTarBlockBytes, '\0');
  return out;
}

}  // namespace tether::codec
