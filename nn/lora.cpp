// LoRA adapters on Linear and Conv1D layers (Note [LoRA], nn/lora.h): which
// layers, the forward term, freezing, merging. The config's JSON is
// nn/lora_config.cpp's, the PEFT files nn/lora_files.cpp's.
#include "nn/lora.h"

#include <algorithm>
#include <cmath>

#include "nn/name_pattern.h"

namespace kiln::nn {

// ---- the forward term (Adaptable, nn/layers.h) -----------------------------

bool adapter_term_needed(const Adaptable& layer) { return layer.adapter && !layer.adapter->merged; }

Tensor Adaptable::adapter_term(const Tensor& x) const {
  if (!adapter_term_needed(*this)) return Tensor();
  const LoraAdapter& a = *adapter;
  // x (..., in) -> (..., r) -> (..., out), scaled
  Tensor h = linear(a.dropout->forward(x), a.A->weight);
  return mul(linear(h, a.B->weight), a.scale);
}

Tensor Adaptable::add_adapter_term(const Tensor& y, const Tensor& x) const {
  Tensor t = adapter_term(x);
  return t.defined() ? add(y, t) : y;
}

// ---- which layers ------------------------------------------------------------

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// PEFT's list form: the name itself or its last dotted components.
bool name_listed(const std::string& name, const std::string& target) {
  return name == target || ends_with(name, "." + target);
}

// The output layer "all-linear" leaves out (PEFT: the model's output
// embeddings; the heads kiln's families name so).
bool is_output_layer(const std::string& name) {
  const std::string last = name.substr(name.rfind('.') + 1);
  return last == "lm_head" || last == "classifier" || last == "score" || last == "out_proj" ||
         last == "seq_relationship" || last == "decoder" || last == "vocab_projector";
}

struct Selected {
  std::string name;
  Module* module;
  Adaptable* layer;
};

std::vector<Selected> select_layers(const Module& model, const LoraConfig& c) {
  std::optional<NamePattern> regex;
  if (c.target_regex) regex.emplace(*c.target_regex, "LoRA target_modules");
  const bool all_linear = !regex && c.target_modules == std::vector<std::string>{"all-linear"};
  std::vector<bool> used(c.target_modules.size(), false);
  std::vector<Selected> out;
  for (auto& [name, m] : model.named_modules()) {
    bool hit = false;
    if (regex) {
      hit = regex->full_match(name);
    } else if (all_linear) {
      hit = dynamic_cast<Adaptable*>(m.get()) && !is_output_layer(name) && name.find(".lora_") == std::string::npos;
    } else {
      for (size_t i = 0; i < c.target_modules.size(); ++i)
        if (name_listed(name, c.target_modules[i])) hit = used[i] = true;
    }
    if (!hit) continue;
    auto* layer = dynamic_cast<Adaptable*>(m.get());
    KILN_CHECK(layer != nullptr, "LoRA target module '", name,
               "' is not a linear layer (LoRA adapts Linear and GPT-2's Conv1D layers)");
    KILN_CHECK(!layer->adapter, "LoRA target module '", name, "' already has an adapter");
    out.push_back({name, m.get(), layer});
  }
  if (!regex && !all_linear)
    for (size_t i = 0; i < used.size(); ++i)
      KILN_CHECK(used[i], "LoRA target module '", c.target_modules[i],
                 "' is not in the model (its linear layers are named like '",
                 out.empty() ? std::string("encoder.layer.0.attention.self.query") : out.front().name, "')");
  KILN_CHECK(!out.empty(), "LoRA target modules ",
             regex ? "'" + *c.target_regex + "'" : std::string("all-linear"), " select no layer of the model");
  return out;
}

void attach(Selected& s, const LoraConfig& c) {
  Tensor& w = s.layer->base_weight();
  const bool in_out = s.layer->weight_is_in_out();
  const int64_t in = w.size(in_out ? 0 : 1), out = w.size(in_out ? 1 : 0);
  auto a = std::make_shared<LoraAdapter>();
  a->A = std::make_shared<Linear>(in, c.r, false);   // kaiming_uniform(a = sqrt(5)), as torch.nn.Linear
  a->B = std::make_shared<Linear>(c.r, out, false);
  {
    NoGradGuard g;
    if (c.init_lora_weights == "gaussian") a->A->weight.copy_(randn({c.r, in}) * (1.0 / static_cast<double>(c.r)));
    if (c.init_lora_weights != "false") a->B->weight.zero_();
    a->A->to(w.device());
    a->B->to(w.device());
    if (w.dtype() != a->A->weight.dtype()) {
      a->A->to(w.dtype());
      a->B->to(w.dtype());
    }
  }
  a->dropout = std::make_shared<Dropout>(c.lora_dropout);
  a->dropout->train(s.module->is_training());
  a->scale = c.scaling();
  s.module->add_module("lora_A", a->A);
  s.module->add_module("lora_B", a->B);
  s.module->add_module("lora_dropout", a->dropout);
  s.layer->adapter = std::move(a);
}

}  // namespace

std::vector<std::pair<std::string, Adaptable*>> adapted_layers(const Module& model) {
  std::vector<std::pair<std::string, Adaptable*>> out;
  for (auto& [name, m] : model.named_modules())
    if (auto* l = dynamic_cast<Adaptable*>(m.get()); l && l->adapter) out.emplace_back(name, l);
  return out;
}

std::vector<std::string> lora_targets(const Module& model, const LoraConfig& config) {
  config.validate();
  std::vector<std::string> names;
  for (const Selected& s : select_layers(model, config)) names.push_back(s.name);
  return names;
}

std::vector<std::string> add_lora(Module& model, const LoraConfig& config) {
  config.validate();
  std::vector<Selected> chosen = select_layers(model, config);
  for (Selected& s : chosen) {  // every check before the model changes
    const Tensor& w = s.layer->base_weight();
    // A rank past both sides of the layer adds nothing a full update would not (and could ask for gigabytes).
    KILN_CHECK(config.r <= std::max(w.size(0), w.size(1)), "LoRA r = ", config.r, " exceeds the size of layer '",
               s.name, "' (", shape_str(w.sizes()), ")");
  }
  // Everything frozen, then what trains: the adapters, the biases bias says, the modules to save.
  for (auto& [n, p] : model.named_parameters()) Tensor(p).set_requires_grad(false);
  std::vector<std::string> names;
  for (Selected& s : chosen) {
    attach(s, config);
    if (config.bias == "lora_only" && s.layer->base_bias().defined()) s.layer->base_bias().set_requires_grad(true);
    names.push_back(s.name);
  }
  if (config.bias == "all")
    for (auto& [n, p] : model.named_parameters())
      if (ends_with(n, ".bias") || n == "bias") Tensor(p).set_requires_grad(true);
  const std::vector<std::string> saved = config.saved_modules();
  for (const auto& entry : model.named_modules()) {
    const std::string& name = entry.first;  // (clang 14 captures no structured binding)
    if (std::any_of(saved.begin(), saved.end(), [&](const std::string& t) { return ends_with(name, t); }))
      for (auto& [n, p] : entry.second->named_parameters()) Tensor(p).set_requires_grad(true);
  }
  return names;
}

// ---- merging -----------------------------------------------------------------

namespace {

// scale B A as the layer stores its weight: (out, in), or (in, out) for Conv1D.
Tensor merged_term(Adaptable& l) {
  const LoraAdapter& a = *l.adapter;
  Tensor d = mul(matmul(a.B->weight, a.A->weight), a.scale);  // (out, in)
  return l.weight_is_in_out() ? transpose(d, 0, 1) : d;
}

}  // namespace

void merge_adapters(Module& model) {
  NoGradGuard g;
  for (auto& [name, l] : adapted_layers(model)) {
    LoraAdapter& a = *l->adapter;
    if (a.merged) continue;
    Tensor& w = l->base_weight();
    a.weight_before_merge = w.detach().clone();
    w.copy_(add(w.detach(), merged_term(*l)));
    w.bump_version();
    a.merged = true;
  }
}

void unmerge_adapters(Module& model) {
  NoGradGuard g;
  for (auto& [name, l] : adapted_layers(model)) {
    LoraAdapter& a = *l->adapter;
    if (!a.merged) continue;
    l->base_weight().copy_(a.weight_before_merge);
    l->base_weight().bump_version();
    a.weight_before_merge = Tensor();
    a.merged = false;
  }
}

void merge_and_unload(Module& model) {
  merge_adapters(model);
  for (auto& [name, m] : model.named_modules()) {
    auto* l = dynamic_cast<Adaptable*>(m.get());
    if (!l || !l->adapter) continue;
    m->remove_module("lora_A");
    m->remove_module("lora_B");
    m->remove_module("lora_dropout");
    l->adapter.reset();
  }
}

}  // namespace kiln::nn
