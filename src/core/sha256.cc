// SHA-256 / HMAC-SHA256 over OpenSSL's EVP and HMAC interfaces (see sha256.h).
#include "core/sha256.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "core/check.h"

namespace mimo {

struct Sha256::Ctx {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  MIMO_CHECK(ctx_->md != nullptr && EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) == 1,
             "OpenSSL: cannot start a SHA-256 digest");
}

Sha256::~Sha256() = default;

void Sha256::Update(std::string_view bytes) {
  MIMO_CHECK(EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size()) == 1, "OpenSSL: SHA-256 update");
}

Sha256Digest Sha256::Finish() {
  Sha256Digest d{};
  unsigned int n = 0;
  MIMO_CHECK(EVP_DigestFinal_ex(ctx_->md, d.data(), &n) == 1 && n == d.size(),
             "OpenSSL: SHA-256 final");
  return d;
}

Sha256Digest Sha256::Of(std::string_view bytes) {
  Sha256 s;
  s.Update(bytes);
  return s.Finish();
}

Sha256Digest HmacSha256(std::string_view key, std::string_view message) {
  Sha256Digest d{};
  unsigned int n = 0;
  // HMAC() with an empty key needs a non-null pointer.
  static const unsigned char kEmpty = 0;
  const void* k = key.empty() ? &kEmpty : static_cast<const void*>(key.data());
  const unsigned char* out =
      HMAC(EVP_sha256(), k, static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), d.data(), &n);
  MIMO_CHECK(out != nullptr && n == d.size(), "OpenSSL: HMAC-SHA256");
  return d;
}

std::string HexDigest(const Sha256Digest& d) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (uint8_t b : d) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return a.empty() || CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace mimo
