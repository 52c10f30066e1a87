// Helpers for fuzz targets whose reader takes a path, not bytes: a private
// scratch directory (made once per process, removed at exit) that the target
// empties and refills for every input, so that no file of an earlier input can
// influence a later one. It is made under $KILN_FUZZ_SCRATCH, else /dev/shm
// when writable (creating and removing files there is about 5x faster than on
// a disk-backed /tmp, which otherwise bounds these targets' exec/s), else
// $TMPDIR, else /tmp. A replay run removes it at exit; a libFuzzer run ends
// with _Exit and leaves it behind, so tools/fuzz.sh passes KILN_FUZZ_SCRATCH
// and removes that folder itself.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace kiln_fuzz {

inline void require(bool ok, const char* target, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "%s: property violated: %s\n", target, what);
  std::abort();
}

class Scratch {
 public:
  Scratch() {
    std::string base = "/tmp";
    if (const char* tmp = std::getenv("TMPDIR"); tmp && *tmp) base = tmp;
    if (::access("/dev/shm", W_OK | X_OK) == 0) base = "/dev/shm";
    if (const char* dir = std::getenv("KILN_FUZZ_SCRATCH"); dir && *dir) base = dir;
    std::string tmpl = base + "/kiln-fuzz-scratch.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) {
      std::perror("kiln_fuzz::Scratch: mkdtemp");
      std::abort();
    }
    root_ = buf.data();
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  // root()/dir, emptied (created when missing).
  std::string fresh_dir(const std::string& dir = "d") const {
    const std::filesystem::path p = root_ / dir;
    std::error_code ec;
    std::filesystem::remove_all(p, ec);
    std::filesystem::create_directories(p);
    return p.string();
  }
  const std::filesystem::path& root() const { return root_; }

 private:
  std::filesystem::path root_;
};

inline void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "kiln_fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

// `data` split at every occurrence of `separator` (which is dropped); always
// at least one part.
inline std::vector<std::string_view> split(std::string_view data, std::string_view separator) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  for (size_t at; (at = data.find(separator, begin)) != std::string_view::npos; begin = at + separator.size())
    parts.push_back(data.substr(begin, at - begin));
  parts.push_back(data.substr(begin));
  return parts;
}

// Call in a target's catch of kiln::Error: with KILN_FUZZ_VERBOSE set (e.g.
// when replaying seeds), says why the input was rejected.
inline int rejected(const kiln::Error& e) {
  static const bool verbose = std::getenv("KILN_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "rejected: %s\n", e.what());
  return 0;
}

// Whether f() throws kiln::Error (any other exception escapes).
template <typename F>
bool throws_error(F&& f) {
  try {
    f();
  } catch (const kiln::Error&) {
    return true;
  }
  return false;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace kiln_fuzz
