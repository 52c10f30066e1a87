#include "nn/freeze.h"

#include "nn/name_pattern.h"

namespace kiln::nn {

std::vector<std::string> freeze(Module& model, const std::vector<std::string>& patterns, const std::string& source) {
  std::vector<NamePattern> compiled;
  for (const std::string& p : patterns) compiled.emplace_back(p, source);
  std::vector<bool> found(compiled.size(), false);
  std::vector<std::string> frozen;
  for (auto& [name, p] : model.named_parameters()) {
    bool hit = false;
    for (size_t i = 0; i < compiled.size(); ++i)
      if (compiled[i].search(name)) hit = found[i] = true;
    if (!hit) continue;
    Tensor t = p;
    t.set_requires_grad(false);
    frozen.push_back(name);
  }
  for (size_t i = 0; i < compiled.size(); ++i)
    KILN_CHECK(found[i], source, " '", compiled[i].pattern(), "' matches no parameter of the model (names look like '",
               model.named_parameters().empty() ? std::string("?") : model.named_parameters().front().first, "')");
  return frozen;
}

NamedTensors trainable_parameters(const Module& model) {
  NamedTensors out;
  for (auto& [name, p] : model.named_parameters())
    if (p.requires_grad()) out.emplace_back(name, p);
  return out;
}

}  // namespace kiln::nn
