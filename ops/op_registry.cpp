#include "ops/op_registry.h"

#include "core/error.h"

namespace kiln {
namespace {
std::vector<OpInfo>& registry() {
  static std::vector<OpInfo> r;
  return r;
}
}  // namespace

OpRegistrar::OpRegistrar(OpInfo info) {
  for (const OpInfo& o : registry())
    KILN_CHECK(o.name != info.name, "op registry: '", info.name, "' registered twice");
  registry().push_back(std::move(info));
}

const std::vector<OpInfo>& op_registry() { return registry(); }

const OpInfo* find_op(const std::string& name) {
  for (const OpInfo& o : registry())
    if (o.name == name) return &o;
  return nullptr;
}

}  // namespace kiln
