// CRC-32C (Castagnoli), used as the armor line checksum. Table-driven; the
// armor path is bounded by channel speed, not by this.
#pragma once

#include <cstdint>
#include <string_view>

namespace tether::protocol {

std::uint32_t Crc32c(std::string_view data, std::uint32_t crc = 0);

}  // namespace tether::protocol
