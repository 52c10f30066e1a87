#include "data/integrity.h"

#include <fcntl.h>
#include <isa-l/crc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace kiln::data {

void Crc32c::update(const void* data, size_t n) {
  // crc32_iscsi neither inverts the initial value nor the result (the class
  // does), and takes an int length: chunks of at most 2^30 bytes.
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    state_ = crc32_iscsi(p, static_cast<int>(chunk), state_);
    p += chunk;
    n -= chunk;
  }
}

uint32_t crc32c(std::span<const uint8_t> data) {
  Crc32c c;
  c.update(data.data(), data.size());
  return c.value();
}

FileDigest file_digest(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  KILN_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": not a regular file");
  }
  std::vector<unsigned char> buf(size_t{1} << 20);
  Crc32c crc;
  FileDigest d;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail(path, ": read error: ", std::strerror(err));
    }
    if (n == 0) break;
    crc.update(buf.data(), static_cast<size_t>(n));
    d.bytes += static_cast<uint64_t>(n);
  }
  ::close(fd);
  d.crc32c = crc.value();
  return d;
}

std::string crc32c_hex(uint32_t crc) {
  static const char* digits = "0123456789abcdef";
  std::string s(8, '0');
  for (int i = 7; i >= 0; --i, crc >>= 4) s[static_cast<size_t>(i)] = digits[crc & 15];
  return s;
}

std::optional<uint32_t> parse_crc32c_hex(const std::string& hex) {
  if (hex.size() != 8 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) return std::nullopt;
  return static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
}

}  // namespace kiln::data
