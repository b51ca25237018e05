// SecureRandomBytes / SecureRandomId (see secure_random.h).
#include "core/secure_random.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdint>

#include "core/check.h"

namespace mimo {

void SecureRandomBytes(void* out, size_t n) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    const ssize_t got = getrandom(p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    MIMO_CHECK(got > 0, "getrandom failed (errno %d)", errno);
    p += got;
    n -= static_cast<size_t>(got);
  }
}

std::string SecureRandomId(std::string_view prefix, int length) {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string s(prefix);
  uint8_t buf[64];
  size_t avail = 0, pos = 0;
  while (static_cast<int>(s.size() - prefix.size()) < length) {
    if (pos == avail) {
      SecureRandomBytes(buf, sizeof(buf));
      avail = sizeof(buf);
      pos = 0;
    }
    const uint8_t b = buf[pos++];
    if (b >= 248) continue;  // 248 = 4 x 62: keep the draw uniform
    s += kAlnum[b % 62];
  }
  return s;
}

}  // namespace mimo
