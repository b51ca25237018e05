// Bytes from the operating system's CSPRNG (getrandom(2)): for identifiers others must not be
// able to guess (stored response ids, message ids, tool-call ids) and for per-process keys.
#pragma once

#include <cstddef>
#include <string>

namespace mimo {

// Fills `out` with `n` random bytes; aborts if the kernel cannot supply them (no fallback to a
// weaker generator).
void SecureRandomBytes(void* out, size_t n);

// `prefix` then `length` characters of [A-Za-z0-9] drawn uniformly (rejection sampling): 24
// characters carry 142 bits.
std::string SecureRandomId(std::string_view prefix, int length = 24);

}  // namespace mimo
