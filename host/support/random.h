// Random bytes from the kernel (secrets, launch and relay ids).
#pragma once

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace tether::internal {

// `n` random bytes. Aborts when the kernel has no randomness to give: a
// secret cannot be made, and our environment is broken.
inline std::string RandomBytes(std::size_t n) {
  std::string out(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::getrandom(out.data() + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) std::abort();
    got += static_cast<std::size_t>(r);
  }
  return out;
}

}  // namespace tether::internal
