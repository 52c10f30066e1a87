// Helpers for tests of hostile input (Note [Bounded input], core/file_util.h):
// FIFOs, a scratch directory, and an error assertion that runs its statement
// in a child process under a time limit and a memory budget, so that a reader
// which would hang on a FIFO or allocate gigabytes fails the test instead of
// hanging or exhausting the machine.
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace kiln::testing {

// The test process's pid, also inside the child of a "threadsafe" death
// test (which re-executes the binary and re-runs the test body up to the
// death test): there, the parent's.
inline int test_pid() { return GTEST_FLAG_GET(internal_run_death_test).empty() ? ::getpid() : ::getppid(); }

// A fresh directory named after the running test, removed on scope exit. A
// death test's child re-creates the same directory (and what the test body
// writes into it before the death test) and exits without removing it.
class ScratchPath {
 public:
  explicit ScratchPath(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() /
            ("kiln_" + tag + "_" + std::to_string(test_pid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchPath() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchPath(const ScratchPath&) = delete;
  ScratchPath& operator=(const ScratchPath&) = delete;
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }
  // Writes `text` to name and returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = *this / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  // Makes a FIFO called name (nothing ever writes to it) and returns its path.
  std::string fifo(const std::string& name) const {
    const std::string p = *this / name;
    EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0) << "mkfifo " << p;
    return p;
  }

 private:
  std::filesystem::path path_;
};

// The peak resident set of this process, in KiB.
inline long peak_rss_kib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// Child exit codes of EXPECT_KILN_ERROR_BOUNDED.
enum BoundedExit { kBoundedOk = 0, kBoundedWrongMessage = 2, kBoundedNoError = 3, kBoundedTooMuchMemory = 4 };

}  // namespace kiln::testing

// EXPECT_KILN_ERROR_BOUNDED(stmt, part, seconds, mib): in a child process
// (a gtest death test, re-executed so that it starts small), stmt must throw
// kiln::Error holding `part` within `seconds` (SIGALRM kills a hang) and
// raise the peak resident set by less than `mib` MiB.
#define EXPECT_KILN_ERROR_BOUNDED(stmt, part, seconds, mib)                                                  \
  do {                                                                                                       \
    GTEST_FLAG_SET(death_test_style, "threadsafe");                                                          \
    EXPECT_EXIT(                                                                                             \
        {                                                                                                    \
          ::alarm(seconds);                                                                                  \
          const long rss0 = ::kiln::testing::peak_rss_kib();                                                 \
          try {                                                                                              \
            (void)(stmt);                                                                                    \
          } catch (const ::kiln::Error& e) {                                                                 \
            const long grew_kib = ::kiln::testing::peak_rss_kib() - rss0;                                    \
            std::fprintf(stderr, "kiln::Error: %s (peak RSS grew %ld KiB)\n", e.what(), grew_kib);           \
            if (std::string(e.what()).find(part) == std::string::npos)                                       \
              std::_Exit(::kiln::testing::kBoundedWrongMessage);                                             \
            std::_Exit(grew_kib < long{mib} * 1024 ? ::kiln::testing::kBoundedOk                             \
                                                   : ::kiln::testing::kBoundedTooMuchMemory);                \
          }                                                                                                  \
          std::_Exit(::kiln::testing::kBoundedNoError);                                                      \
        },                                                                                                   \
        ::testing::ExitedWithCode(0), "")                                                                    \
        << #stmt;                                                                                            \
  } while (0)

// A FIFO given as input: a clear kiln::Error within 20 s, not a hang.
#define EXPECT_FIFO_REFUSED(stmt) EXPECT_KILN_ERROR_BOUNDED(stmt, "is not a regular file (a FIFO)", 20, 256)
