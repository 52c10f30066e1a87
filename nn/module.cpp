#include "nn/module.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "ops/activation_checkpoint.h"

namespace kiln::nn {

void Module::check_name(const std::string& name) const {
  KILN_CHECK(!name.empty() && name.find('.') == std::string::npos, "Module: invalid name '", name, "'");
  auto taken = [&](const auto& v) {
    return std::any_of(v.begin(), v.end(), [&](const auto& p) { return p.first == name; });
  };
  KILN_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), "Module: name '", name,
             "' registered twice");
}

Tensor& Module::register_parameter(const std::string& name, Tensor& member, Tensor value) {
  check_name(name);
  member = std::move(value);
  if (member.defined() && !member.requires_grad()) member.set_requires_grad(true);
  params_.emplace_back(name, &member);
  return member;
}

Tensor& Module::register_buffer(const std::string& name, Tensor& member, Tensor value) {
  check_name(name);
  member = std::move(value);
  buffers_.emplace_back(name, &member);
  return member;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_name(name);
  KILN_CHECK(m != nullptr, "Module: submodule '", name, "' is null");
  children_.emplace_back(name, std::move(m));
}

void Module::remove_module(const std::string& name) {
  const auto n = std::erase_if(children_, [&](const auto& c) { return c.first == name; });
  KILN_CHECK(n == 1, "Module: no submodule '", name, "' to remove");
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  for (const auto& [n, c] : children_) {
    out.emplace_back(n, c);
    for (auto& [sub, m] : c->named_modules()) out.emplace_back(n + "." + sub, m);
  }
  return out;
}

void Module::for_each_tensor(const std::function<void(const std::string&, Tensor&, bool)>& fn,
                             const std::string& prefix) {
  for (auto& [n, t] : params_)
    if (t->defined()) fn(prefix + n, *t, true);
  for (auto& [n, t] : buffers_)
    if (t->defined()) fn(prefix + n, *t, false);
  for (auto& [n, c] : children_) c->for_each_tensor(fn, prefix + n + ".");
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  const_cast<Module*>(this)->for_each_tensor([&](const std::string& n, Tensor& t, bool p) {
    if (p) out.emplace_back(n, t);
  });
  // a tied parameter appears once, under its first name
  NamedTensors unique;
  for (auto& e : out)
    if (std::none_of(unique.begin(), unique.end(), [&](const auto& u) { return u.second.impl_ptr() == e.second.impl_ptr(); }))
      unique.push_back(e);
  return unique;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  const_cast<Module*>(this)->for_each_tensor([&](const std::string& n, Tensor& t, bool p) {
    if (!p) out.emplace_back(n, t);
  });
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  const_cast<Module*>(this)->for_each_tensor([&](const std::string& n, Tensor& t, bool) { out.emplace_back(n, t); });
  return out;
}

Module::LoadResult Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  LoadResult r;
  std::vector<std::string> mismatched;
  std::map<std::string, bool> seen;
  NoGradGuard no_grad;
  for_each_tensor([&](const std::string& n, Tensor& t, bool) {
    seen[n] = true;
    auto it = state.find(n);
    if (it == state.end()) {
      r.missing.push_back(n);
      return;
    }
    if (it->second.sizes() != t.sizes()) {
      mismatched.push_back(n + " (checkpoint " + shape_str(it->second.sizes()) + ", model " + shape_str(t.sizes()) + ")");
      return;
    }
    t.copy_(it->second);
  });
  for (auto& [n, v] : state)
    if (!seen.count(n)) r.unexpected.push_back(n);
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 20; ++i) s += (i ? ", " : "") + v[i];
    if (v.size() > 20) s += ", ... (" + std::to_string(v.size()) + " in all)";
    return s;
  };
  std::string msg;
  if (!mismatched.empty()) msg += " shape mismatch: " + join(mismatched) + ";";
  if (strict && !r.missing.empty()) msg += " missing keys: " + join(r.missing) + ";";
  if (strict && !r.unexpected.empty()) msg += " unexpected keys: " + join(r.unexpected) + ";";
  KILN_CHECK(msg.empty(), "load_state_dict:", msg);
  return r;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::set_gradient_checkpointing(bool on) {
  checkpointing_ = on;
  for (auto& [n, c] : children_) c->set_gradient_checkpointing(on);
}

Tensor checkpoint_layer(const Module& layer, std::function<Tensor(const TensorList&)> fn, const TensorList& inputs,
                        bool enabled) {
  if (!enabled || !layer.gradient_checkpointing() || !layer.is_training() || !grad_enabled()) return fn(inputs);
  TensorList out = checkpoint(
      [f = std::move(fn)](const TensorList& in) { return TensorList{f(in)}; }, inputs, layer.parameters());
  return out[0];
}

void Module::zero_grad() {
  for_each_tensor([](const std::string&, Tensor& t, bool p) {
    if (p) t.zero_grad();
  });
}

void Module::to(Device device) {
  std::map<TensorImpl*, Tensor> moved;  // keeps tied tensors tied
  for_each_tensor([&](const std::string&, Tensor& t, bool p) {
    auto it = moved.find(t.impl_ptr().get());
    if (it != moved.end()) { t = it->second; return; }
    TensorImpl* key = t.impl_ptr().get();
    Tensor m = to_device(t.detach(), device);
    if (p) m.set_requires_grad(t.requires_grad());  // a frozen parameter stays frozen
    moved[key] = m;
    t = m;
  });
}

void Module::to(DType dtype) {
  std::map<TensorImpl*, Tensor> moved;
  for_each_tensor([&](const std::string&, Tensor& t, bool p) {
    if (!t.is_floating_point()) return;
    auto it = moved.find(t.impl_ptr().get());
    if (it != moved.end()) { t = it->second; return; }
    TensorImpl* key = t.impl_ptr().get();
    Tensor m = to_dtype(t.detach(), dtype);
    if (p) m.set_requires_grad(t.requires_grad());
    moved[key] = m;
    t = m;
  });
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

}  // namespace kiln::nn
