// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104): for tokens the server issues and checks
// (signatures on thinking blocks, opaque reasoning items), not for anything secret at rest.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace mimo {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void Update(std::string_view bytes);
  Sha256Digest Finish();  // the object must not be updated afterwards

  static Sha256Digest Of(std::string_view bytes);

 private:
  void Block(const uint8_t* p);  // one 64-byte block

  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_;
  size_t buf_len_ = 0;
  uint64_t total_ = 0;  // bytes hashed
};

Sha256Digest HmacSha256(std::string_view key, std::string_view message);

// Lower-case hex of a digest.
std::string HexDigest(const Sha256Digest& d);

// Compares two strings in time that depends only on their lengths (for tokens).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace mimo
