#include "protocol/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

namespace tether::protocol {
namespace {

constexpr std::uint32_t kPoly = 0x82F63B78;  // reflected Castagnoli polynomial

// Slicing-by-8: eight tables, eight bytes per step (about 5x the bytewise
// loop; the text armor checksums every frame both ways). Portable: the same
// code on the host and in both static supervisors.
constexpr std::array<std::array<std::uint32_t, 256>, 8> MakeTables() {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[0][i] = c;
  }
  for (std::uint32_t i = 0; i < 256; ++i) {
    for (int k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  }
  return t;
}

constexpr auto kTables = MakeTables();

// The instruction computes the same reflected CRC-32C, eight bytes a step
// (latency-bound, about 3x the tables; ample for a channel-bound armor).
// Inline assembly on both architectures: no intrinsics' target-feature
// plumbing, which differs between the host's gcc and zig's clang.
#if defined(__x86_64__)
std::uint32_t Crc32cHardware(const unsigned char* p, std::size_t n, std::uint32_t crc) {
  std::uint64_t c = crc;
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    __asm__("crc32q %1, %0" : "+r"(c) : "rm"(v));
  }
  crc = static_cast<std::uint32_t>(c);
  for (; n > 0; ++p, --n) __asm__("crc32b %1, %0" : "+r"(crc) : "rm"(*p));
  return crc;
}
bool DetectHardware() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_SSE4_2) != 0;
}
#elif defined(__aarch64__)
std::uint32_t Crc32cHardware(const unsigned char* p, std::size_t n, std::uint32_t crc) {
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    __asm__(".arch_extension crc\n\tcrc32cx %w0, %w0, %x1" : "+r"(crc) : "r"(v));
  }
  for (; n > 0; ++p, --n) {
    const std::uint32_t b = *p;
    __asm__(".arch_extension crc\n\tcrc32cb %w0, %w0, %w1" : "+r"(crc) : "r"(b));
  }
  return crc;
}
bool DetectHardware() {
  constexpr unsigned long kHwcapCrc32 = 1ul << 7;  // HWCAP_CRC32 (asm/hwcap.h)
  return (getauxval(AT_HWCAP) & kHwcapCrc32) != 0;
}
#else
std::uint32_t Crc32cHardware(const unsigned char*, std::size_t, std::uint32_t crc) { return crc; }
bool DetectHardware() { return false; }
#endif

}  // namespace

bool Crc32cAccelerated() {
  static const bool hardware = DetectHardware();  // (safe from other static initializers)
  return hardware;
}

std::uint32_t Crc32c(std::string_view data, std::uint32_t crc) {
  if (!Crc32cAccelerated()) return Crc32cPortable(data, crc);
  return ~Crc32cHardware(reinterpret_cast<const unsigned char*>(data.data()), data.size(), ~crc);
}

std::uint32_t Crc32cPortable(std::string_view data, std::uint32_t crc) {
  crc = ~crc;
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  std::size_t n = data.size();
  while (n >= 8) {
    // Little-endian load, assembled bytewise (no alignment or endianness
    // assumptions; compilers turn it into one load on x86_64 and aarch64).
    const std::uint32_t lo = (static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                              static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24) ^
                             crc;
    const std::uint32_t hi = static_cast<std::uint32_t>(p[4]) | static_cast<std::uint32_t>(p[5]) << 8 |
                             static_cast<std::uint32_t>(p[6]) << 16 | static_cast<std::uint32_t>(p[7]) << 24;
    crc = kTables[7][lo & 0xff] ^ kTables[6][(lo >> 8) & 0xff] ^ kTables[5][(lo >> 16) & 0xff] ^
          kTables[4][lo >> 24] ^ kTables[3][hi & 0xff] ^ kTables[2][(hi >> 8) & 0xff] ^
          kTables[1][(hi >> 16) & 0xff] ^ kTables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = kTables[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

}  // namespace tether::protocol
