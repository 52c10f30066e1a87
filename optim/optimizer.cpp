#include "optim/optimizer.h"

#include <atomic>
#include <cmath>
#include <optional>
#include <set>
#include <sstream>

#include "autograd/grad_mode.h"
#include "core/profiler.h"
#include "ops/ops.h"

namespace kiln::optim {
namespace {

Tensor int64_scalar(int64_t v) {
  Tensor t = empty_tensor({}, DType::Int64, kCPU);
  *t.data_ptr<int64_t>() = v;
  return t;
}

Tensor float64_scalar(double v) {
  Tensor t = empty_tensor({}, DType::Float64, kCPU);
  *t.data_ptr<double>() = v;
  return t;
}

std::atomic<bool> g_force_generic{false};

// A contiguous copy on `device` with the same bytes (the optimizer owns its
// state; state_dict() hands out CPU copies).
Tensor owned_copy(const Tensor& src, Device device) {
  NoGradGuard no_grad;
  Tensor dst = empty_tensor(src.sizes(), src.dtype(), device);
  dst.copy_(src);
  return dst;
}

std::string group_prefix(size_t g) { return "param_groups." + std::to_string(g) + "."; }
std::string state_prefix(size_t i) { return "state." + std::to_string(i) + "."; }

std::string join_limited(const std::vector<std::string>& items) {
  constexpr size_t kShown = 12;
  std::string out;
  for (size_t i = 0; i < items.size() && i < kShown; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kShown) out += ", ... (" + std::to_string(items.size() - kShown) + " more)";
  return out;
}

void check_lr_and_decay(const std::string& opt, double lr, double weight_decay, size_t g) {
  KILN_CHECK(std::isfinite(lr) && lr >= 0, opt, ": invalid learning rate ", lr, " in parameter group ", g,
             " (must be finite and >= 0)");
  KILN_CHECK(std::isfinite(weight_decay) && weight_decay >= 0, opt, ": invalid weight_decay ", weight_decay,
             " in parameter group ", g, " (must be finite and >= 0)");
}

}  // namespace

void set_force_generic_update(bool on) { g_force_generic.store(on); }
bool force_generic_update() { return g_force_generic.load(); }

double ParamGroup::option(const std::string& name) const {
  const auto it = options.find(name);
  KILN_CHECK(it != options.end(), "ParamGroup: no option '", name, "'");
  return it->second;
}

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups, double default_lr,
                     double default_weight_decay, std::map<std::string, double> defaults)
    : name_(std::move(name)), groups_(std::move(groups)) {
  size_t total = 0;
  for (const ParamGroup& g : groups_) total += g.params.size();
  KILN_CHECK(total > 0, name_, ": got an empty parameter list");

  std::set<const StorageImpl*> seen;
  for (size_t g = 0; g < groups_.size(); ++g) {
    ParamGroup& group = groups_[g];
    offsets_.push_back(state_.size());
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      const std::string where = detail::str_cat("parameter ", i, " of group ", g);
      KILN_CHECK(p.defined(), name_, ": ", where, " is an undefined tensor");
      KILN_CHECK(p.dtype() == DType::Float32 || p.dtype() == DType::Float64, name_, ": ", where, " is ",
                 dtype_name(p.dtype()), "; parameters must be float32 or float64");
      KILN_CHECK(p.is_contiguous(), name_, ": ", where, " (", p.str(), ") is not contiguous");
      KILN_CHECK(p.is_leaf(), name_, ": ", where, " is not a leaf tensor (it has a grad_fn); optimize leaves");
      KILN_CHECK(seen.insert(p.storage().get()).second, name_, ": ", where,
                 " shares its storage with an earlier parameter (a parameter appears twice?)");
      state_.emplace_back();
    }
    for (const auto& [key, value] : group.options) {
      if (defaults.count(key)) continue;
      std::string known;
      for (const auto& [k, v] : defaults) known += (known.empty() ? "" : ", ") + k;
      fail(name_, ": unknown option '", key, "' in parameter group ", g, " (known: ", known, ")");
    }
    for (const auto& [key, value] : defaults) group.options.emplace(key, value);
    if (!group.lr) group.lr = default_lr;
    if (!group.weight_decay) group.weight_decay = default_weight_decay;
    check_lr_and_decay(name_, *group.lr, *group.weight_decay, g);
  }
}

void Optimizer::validate_all_groups() const {
  for (const ParamGroup& g : groups_) validate(g);
}

void Optimizer::check_group_index(size_t group, const char* what) const {
  KILN_CHECK(group < groups_.size(), name_, ".", what, ": group ", group, " out of range (", groups_.size(),
             " groups)");
}

double Optimizer::lr(size_t group) const {
  check_group_index(group, "lr");
  return *groups_[group].lr;
}

void Optimizer::set_lr(size_t group, double lr) {
  check_group_index(group, "set_lr");
  check_lr_and_decay(name_, lr, *groups_[group].weight_decay, group);
  groups_[group].lr = lr;
}

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g) check_lr_and_decay(name_, lr, *groups_[g].weight_decay, g);
  for (ParamGroup& g : groups_) g.lr = lr;
}

int64_t Optimizer::param_step(size_t index) const {
  KILN_CHECK(index < state_.size(), name_, ".param_step: parameter ", index, " out of range (", state_.size(),
             " parameters)");
  return state_[index].step;
}

void Optimizer::step() {
  std::optional<profiler::RecordScope> span;  // "AdamW.step"; the name is only built while profiling
  if (profiler::is_active()) [[unlikely]]
    span.emplace(name_ + ".step", profiler::Category::Optimizer);
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    std::vector<UpdateItem> items;
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      const Tensor& grad = p.grad();
      if (!grad.defined() || !owns(flat_index(g, i))) continue;
      KILN_CHECK(grad.sizes() == p.sizes() && grad.dtype() == p.dtype() && grad.device() == p.device(), name_,
                 ".step: the gradient of parameter ", i, " of group ", g, " is ", grad.str(),
                 " but the parameter is ", p.str());
      items.push_back(UpdateItem{p, grad.is_contiguous() ? grad : grad.contiguous(), &state_[flat_index(g, i)]});
    }
    for (UpdateItem& item : items) ++item.state->step;
    update_group(group, items);
    for (UpdateItem& item : items) item.param.bump_version();
  }
}

int64_t Optimizer::state_bytes() const {
  int64_t n = 0;
  for (const ParamState& st : state_)
    for (const Tensor& b : st.buffers) n += b.numel() * static_cast<int64_t>(b.element_size());
  return n;
}

void Optimizer::set_owned(std::vector<bool> owned) {
  KILN_CHECK(owned.empty() || owned.size() == state_.size(), name_, ".set_owned: ", owned.size(),
             " entries for ", state_.size(), " parameters");
  owned_ = std::move(owned);
  for (size_t i = 0; i < state_.size(); ++i)
    if (!owns(i)) state_[i] = ParamState{};
}

void Optimizer::update_group(const ParamGroup& group, const std::vector<UpdateItem>& items) {
  for (const UpdateItem& item : items) update(group, item.param, item.grad, *item.state);
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (ParamGroup& group : groups_) {
    for (Tensor& p : group.params) {
      if (!p.grad().defined()) continue;
      if (set_to_none) {
        p.zero_grad();
      } else {
        p.mutable_grad().zero_();
      }
    }
  }
}

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    const std::string pre = group_prefix(g);
    Tensor idx = empty_tensor({static_cast<int64_t>(group.params.size())}, DType::Int64, kCPU);
    for (size_t i = 0; i < group.params.size(); ++i)
      idx.data_ptr<int64_t>()[i] = static_cast<int64_t>(flat_index(g, i));
    out[pre + "params"] = idx;
    out[pre + "lr"] = float64_scalar(*group.lr);
    out[pre + "weight_decay"] = float64_scalar(*group.weight_decay);
    for (const auto& [key, value] : group.options) out[pre + key] = float64_scalar(value);
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<std::string> names = buffer_names(groups_[g]);
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const ParamState& st = state_[flat_index(g, i)];
      if (st.step == 0 || !owns(flat_index(g, i))) continue;
      const std::string pre = state_prefix(flat_index(g, i));
      out[pre + "step"] = int64_scalar(st.step);
      for (size_t b = 0; b < names.size(); ++b) out[pre + names[b]] = owned_copy(st.buffers[b], kCPU);
    }
  }
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  std::vector<std::string> missing, mismatched;
  std::set<std::string> used;
  auto find = [&](const std::string& key) -> const Tensor* {
    const auto it = state.find(key);
    if (it == state.end() || !it->second.defined()) {
      missing.push_back(key);
      return nullptr;
    }
    used.insert(key);
    return &it->second;
  };
  auto scalar = [&](const std::string& key, DType dtype) -> std::optional<double> {
    const Tensor* t = find(key);
    if (!t) return std::nullopt;
    if (t->dim() != 0 || t->dtype() != dtype) {
      mismatched.push_back(detail::str_cat(key, " is ", t->str(), ", expected a 0-dim ", dtype_name(dtype)));
      return std::nullopt;
    }
    return t->item<double>();
  };

  // Hyperparameters into a candidate copy of the groups, validated below.
  std::vector<ParamGroup> groups = groups_;
  for (size_t g = 0; g < groups.size(); ++g) {
    ParamGroup& group = groups[g];
    const std::string pre = group_prefix(g);
    if (const Tensor* idx = find(pre + "params")) {
      std::vector<int64_t> want(group.params.size());
      for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<int64_t>(flat_index(g, i));
      const bool ok = idx->dtype() == DType::Int64 && idx->dim() == 1 && idx->to_vector<int64_t>() == want;
      if (!ok)
        mismatched.push_back(detail::str_cat(pre, "params is ", idx->str(), ", expected the int64 indices of ",
                                             want.size(), " parameters starting at ", flat_index(g, 0)));
    }
    if (auto v = scalar(pre + "lr", DType::Float64)) group.lr = *v;
    if (auto v = scalar(pre + "weight_decay", DType::Float64)) group.weight_decay = *v;
    for (auto& [key, value] : group.options)
      if (auto v = scalar(pre + key, DType::Float64)) value = *v;
    try {
      check_lr_and_decay(name_, *group.lr, *group.weight_decay, g);
      validate(group);
    } catch (const Error& e) {
      mismatched.push_back(std::string("invalid hyperparameters: ") + e.what());
    }
  }

  std::vector<ParamState> new_state(state_.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<std::string> names = buffer_names(groups[g]);
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const size_t flat = flat_index(g, i);
      const std::string pre = state_prefix(flat);
      if (!state.count(pre + "step")) continue;  // no state yet: nothing else may be there
      if (!owns(flat)) {  // another rank's (sharded): accepted, not kept
        for (const std::string& b : names) used.insert(pre + b);
        used.insert(pre + "step");
        continue;
      }
      const std::optional<double> step = scalar(pre + "step", DType::Int64);
      if (step && !(*step >= 1 && *step <= static_cast<double>(kMaxStateCount)))
        mismatched.push_back(detail::str_cat(pre, "step is ", *step, ", expected in [1, 2^53]"));
      const Tensor& p = groups[g].params[i];
      ParamState& st = new_state[flat];
      st.step = step && *step >= 1 && *step <= static_cast<double>(kMaxStateCount) ? static_cast<int64_t>(*step) : 0;
      for (const std::string& b : names) {
        const Tensor* t = find(pre + b);
        if (!t) continue;
        if (t->sizes() != p.sizes() || t->dtype() != p.dtype()) {
          mismatched.push_back(detail::str_cat(pre, b, " is ", t->str(), ", but parameter ", flat, " is ", p.str()));
          continue;
        }
        st.buffers.push_back(owned_copy(*t, p.device()));
      }
    }
  }

  std::vector<std::string> unexpected;
  for (const auto& [key, value] : state)
    if (!used.count(key) && value.defined()) unexpected.push_back(key);
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::ostringstream msg;
    msg << name_ << ".load_state_dict: the state does not match this optimizer";
    if (!missing.empty()) msg << "; missing: " << join_limited(missing);
    if (!unexpected.empty()) msg << "; unexpected: " << join_limited(unexpected);
    if (!mismatched.empty()) msg << "; mismatched: " << join_limited(mismatched);
    throw Error(msg.str());
  }
  groups_ = std::move(groups);
  state_ = std::move(new_state);
}

// Declared in optim/update_loop.h, which this file does not include: its
// kiln::optim::detail would hide kiln::detail (detail::str_cat) above.
namespace detail {
bool use_fused_update(const Tensor& t) { return t.device().is_cpu() && !force_generic_update(); }
bool use_multi_tensor_update(const Tensor& t) {
  return (t.device().is_cpu() || t.device().is_cuda()) &&
         (t.dtype() == DType::Float32 || t.dtype() == DType::Float64) && !force_generic_update();
}
}  // namespace detail

}  // namespace kiln::optim
