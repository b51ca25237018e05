// SHA-256 and HMAC-SHA256 from OpenSSL's libcrypto (Debian's libssl-dev): for tokens the server
// issues and checks (signatures on thinking blocks, opaque reasoning items) and for cache keys,
// not for anything secret at rest. A maintained library rather than our own code: a digest that
// authenticates is not a place for a hand-written implementation.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace mimo {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(std::string_view bytes);
  Sha256Digest Finish();  // the object must not be updated afterwards

  static Sha256Digest Of(std::string_view bytes);

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

Sha256Digest HmacSha256(std::string_view key, std::string_view message);

// Lower-case hex of a digest.
std::string HexDigest(const Sha256Digest& d);

// Compares two strings in time that depends only on their lengths (for tokens).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace mimo
