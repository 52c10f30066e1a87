// Regular-file checks and bounded reads (Note [Bounded input], core/file_util.h).
#include "core/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <cstdio>

#include "core/error.h"

namespace kiln {
namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "of an unknown file type";
}

void check_size(uint64_t size, uint64_t max_bytes, const std::string& what) {
  KILN_CHECK(size <= max_bytes, what, ": file is ", size, " bytes, over the limit of ", max_bytes,
             " bytes");
}

}  // namespace

void check_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  KILN_CHECK(::stat(path.c_str(), &st) == 0, what, ": cannot open: ", std::strerror(errno));
  KILN_CHECK(S_ISREG(st.st_mode), what, ": is not a regular file (", file_kind(st.st_mode), ")");
}

int open_regular_file(const std::string& path, const std::string& what, uint64_t max_bytes,
                      uint64_t* size_bytes) {
  check_regular_file(path, what);
  // O_NONBLOCK: should the path have become a FIFO since the stat, open() still returns.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  KILN_CHECK(fd >= 0, what, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const int err = errno;
  if (!stat_ok || !S_ISREG(st.st_mode)) {
    ::close(fd);
    if (!stat_ok) fail(what, ": cannot stat: ", std::strerror(err));
    fail(what, ": is not a regular file (", file_kind(st.st_mode), ")");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    check_size(size, max_bytes, what);
  }
  if (size_bytes) *size_bytes = size;
  return fd;
}

std::string read_file_bounded(const std::string& path, const std::string& what, uint64_t max_bytes) {
  uint64_t size = 0;
  const int fd = open_regular_file(path, what, max_bytes, &size);
  std::string out;
  try {
    out.reserve(static_cast<size_t>(size));
    char buffer[1 << 16];
    while (true) {
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      KILN_CHECK(n >= 0, what, ": read failed: ", std::strerror(errno));
      if (n == 0) break;
      check_size(out.size() + static_cast<uint64_t>(n), max_bytes, what);  // the file grew
      out.append(buffer, static_cast<size_t>(n));
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return out;
}

void write_file_atomic(const std::string& path, const std::vector<std::span<const uint8_t>>& chunks) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = mkstemp(tmp.data());
  KILN_CHECK(fd >= 0, path, ": cannot create a temporary file beside it: ", std::strerror(errno));
  auto give_up = [&](const char* step) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(path, ": ", step, " failed: ", std::strerror(err));
  };
  for (const auto& chunk : chunks) {
    const uint8_t* p = chunk.data();
    size_t left = chunk.size();
    while (left > 0) {
      const ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) give_up("write");
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  if (fchmod(fd, 0644) != 0) give_up("fchmod");
  if (fsync(fd) != 0) give_up("fsync");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(path, ": close failed: ", std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(path, ": rename from ", tmp, " failed: ", std::strerror(err));
  }
  // Persist the rename itself; best effort (some filesystems refuse fsync on directories).
  // (Not `dir = "."` on an empty string: GCC 12 warns, falsely, on that assignment here.)
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir.push_back('.');
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::string& path, std::string_view text) {
  write_file_atomic(path, {std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size())});
}

}  // namespace kiln
