// CRC-32C (Castagnoli), used as the armor line checksum (every text-tunnel
// frame is checksummed on both ends). The CPU's own instruction where it
// has one (x86_64 SSE4.2, aarch64 CRC32: checked once at run time, so the
// same static supervisor runs on any CPU of its architecture), else
// slicing-by-8 tables.
#pragma once

#include <cstdint>
#include <string_view>

namespace tether::protocol {

std::uint32_t Crc32c(std::string_view data, std::uint32_t crc = 0);

// The table path alone, and whether Crc32c uses the instruction here (for
// tests that compare the two).
std::uint32_t Crc32cPortable(std::string_view data, std::uint32_t crc = 0);
bool Crc32cAccelerated();

}  // namespace tether::protocol
