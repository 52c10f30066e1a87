// `kiln bench`: the parent of every benchmark (tools/bench_*.cpp).
#include <map>

#include "tools/bench.h"

namespace kiln::tools {
namespace {

const Registrar reg("bench", [](CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Benchmarks (figures and commands go to docs/performance.md)");
  cmd->require_subcommand(1);
  auto runners = std::make_shared<std::map<std::string, std::function<int()>>>();
  for (auto& [name, setup] : BenchRegistry::all()) (*runners)[name] = setup(*cmd);
  return [cmd, runners]() -> int {
    for (auto* sub : cmd->get_subcommands()) return runners->at(sub->get_name())();
    return 1;
  };
});

}  // namespace
}  // namespace kiln::tools
