// Shared by the model-family parity tests (test_encoder_families.cpp,
// test_decoder_families.cpp): the transformers-built reference directories,
// comparisons at the unpadded positions, gradients against the reference's,
// config variants, and running a kiln-saved directory in transformers.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "kiln.h"
#include "test_util.h"

namespace kiln::testing {

inline std::string source_file(const char* rel) {
  std::string path = KILN_SOURCE_DIR;
  path += rel;
  return path;
}
inline std::string hf_python() { return env_or("KILN_HF_PYTHON", source_file("/.venv-hf/bin/python")); }
// transformers 4.48 on the same PyTorch (Qwen2 needs >= 4.37, ModernBERT >= 4.48).
inline std::string hf48_python() { return env_or("KILN_HF48_PYTHON", source_file("/.venv-hf48/bin/python")); }
// The reference environment whose transformers has the class `arch`.
inline std::string hf_python_for(const std::string& arch) {
  return arch.rfind("Qwen2", 0) == 0 || arch.rfind("ModernBert", 0) == 0 ? hf48_python() : hf_python();
}

struct FamilyReference {
  std::string dir;
  nlohmann::json manifest;
};

// KILN_BINARY_DIR/<name>-<hash of the reference script>, made once by
// build(tmp) (which writes tmp/manifest.json): built aside and renamed, so a
// concurrent test process never reads a half-written one; every later
// process reuses it until the script changes.
inline FamilyReference family_reference(const std::string& name, const std::string& script,
                                        const std::function<void(const std::string&)>& build) {
  namespace fs = std::filesystem;
  std::ifstream in(script, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string dir = std::string(KILN_BINARY_DIR) + "/" + name + "-" + std::to_string(std::hash<std::string>{}(text));
  if (!fs::exists(dir + "/manifest.json")) {
    const std::string tmp = dir + ".tmp-" + std::to_string(::getpid());
    fs::create_directories(tmp);
    build(tmp);
    std::error_code ec;
    fs::rename(tmp, dir, ec);  // another process may have won: then its copy is used
    if (ec) fs::remove_all(tmp, ec);
  }
  std::ifstream f(dir + "/manifest.json");
  return FamilyReference{dir, nlohmann::json::parse(f)};
}

inline void run_or_throw(const std::string& cmd, const std::string& what) {
  if (std::system(cmd.c_str()) != 0) throw Error(what + " failed: " + cmd);
}

inline double max_abs(const Tensor& t) { return t.numel() ? amax(abs(t.to(DType::Float64))).item<double>() : 0.0; }
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max_abs(sub(a.to(DType::Float64), b.to(DType::Float64)));
}
// How far two float32 implementations' outputs may differ: 2e-5 of the
// largest |value| (float32 sums in another order: torch's GEMM against
// oneDNN's, FMA contraction that differs between compilers and builds), at
// least 1e-4. Llama's logits reach ~14: 1.43e-4 seen in the sanitizer build
// (GCC's and clang's alike), under 1e-4 in Release.
inline double output_tolerance(const Tensor& want) { return std::max(1e-4, 2e-5 * max_abs(want)); }

// Zeroes the padded positions of a (B, T, ...) tensor: neither side's values there are read.
inline Tensor at_tokens(const Tensor& x, const Tensor& mask) {
  Tensor m = to_dtype(mask, DType::Float64);
  while (m.dim() < x.dim()) m = m.unsqueeze(-1);
  return mul(x.to(DType::Float64), m);
}

// A model directory at `dir`: config_from's config.json edited, weights_from's weights.
inline std::string config_variant(const std::string& dir, const std::string& config_from,
                                  const std::string& weights_from, const std::function<void(nlohmann::json&)>& edit) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  fs::copy_file(weights_from + "/model.safetensors", dir + "/model.safetensors");
  nlohmann::json c = nlohmann::json::parse(std::ifstream(config_from + "/config.json"));
  edit(c);
  std::ofstream(dir + "/config.json") << c.dump(2);
  return dir;
}

// Every parameter's gradient against the reference's "grad.<name>" (same
// names, same count), relative to the tensor's largest gradient with a floor
// of 1e-3 of the largest of any tensor: some gradients are zero in exact
// arithmetic (a bias on every key of a query shifts its scores alike, which
// softmax ignores), so both sides hold only rounding noise there. The
// default 2e-4: float32 sums in another order than torch's, in the GEMM
// library and in FMA contraction, which differs between the optimised and
// the sanitizer builds (Qwen2's k_proj.bias, rotated by RoPE and so not zero:
// 1.46e-4 in the ASan build with oneDNN's GEMM, under 1e-4 in Release).
inline void expect_gradients_match(const nn::Module& model, const std::map<std::string, Tensor>& g,
                                   const std::string& what, double tol = 2e-4) {
  double largest = 0.0;
  size_t want = 0;
  for (const auto& [k, t] : g)
    if (k.rfind("grad.", 0) == 0) {
      largest = std::max(largest, max_abs(t));
      ++want;
    }
  size_t grads = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    const auto it = g.find("grad." + name);
    ASSERT_NE(it, g.end()) << what << ": transformers has no gradient for " << name;
    ASSERT_TRUE(p.grad().defined()) << what << ": no gradient for " << name;
    const double scale = std::max(max_abs(it->second), 1e-3 * largest);
    EXPECT_LE(max_abs_diff(p.grad(), it->second) / scale, tol) << what << ": gradient of " << name;
    ++grads;
  }
  EXPECT_EQ(grads, want) << what << ": parameter count";
}

// Runs tests/reference/hf_load_check.py: transformers' `arch` loads `dir`
// (no missing or unexpected weights) and runs `inputs` (input_ids,
// attention_mask, optionally labels); its outputs ("output", "loss").
inline std::map<std::string, Tensor> run_in_transformers(const std::string& dir, const std::string& arch,
                                                         const nn::NamedTensors& inputs) {
  const std::string in = dir + "/inputs.safetensors", out = dir + "/outputs.safetensors";
  nn::save_safetensors(in, inputs);
  const std::string cmd = quoted(hf_python_for(arch)) + " " + source_file("/tests/reference/hf_load_check.py") +
                          " --model-dir " + quoted(dir) + " --arch " + arch + " --inputs " + quoted(in) + " --out " +
                          quoted(out);
  run_or_throw(cmd, "transformers' load check");
  return nn::load_safetensors(out);
}

}  // namespace kiln::testing
