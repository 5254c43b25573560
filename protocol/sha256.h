// SHA-256 (FIPS 180-4), for content-addressing and verifying the supervisor
// binary a host uploads into a sandbox. Pure computation, no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tether::protocol {

class Sha256 {
 public:
  Sha256();
  void Update(std::string_view bytes);
  std::array<std::uint8_t, 32> Finish();  // once

 private:
  void Block(const std::uint8_t* p);
  std::uint32_t h_[8];
  std::uint8_t buf_[64];
  std::size_t used_ = 0;
  std::uint64_t total_ = 0;
};

// Lowercase hex digest of `bytes`.
std::string Sha256Hex(std::string_view bytes);

// HMAC-SHA256 (RFC 2104) of `message` under `key`.
std::array<std::uint8_t, 32> HmacSha256(std::string_view key, std::string_view message);

// Compares two byte strings in time independent of where they differ.
bool ConstantTimeEqual(std::string_view a, std::string_view b);

}  // namespace tether::protocol
