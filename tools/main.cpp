// kiln: the command-line tool. Each subcommand lives in tools/cmd_*.cpp.
#include <iostream>
#include <map>

#include "core/error.h"
#include "tools/command.h"

int main(int argc, char** argv) {
  CLI::App app{"kiln: a C++ deep-learning framework for transformers"};
  app.require_subcommand(1);
  std::map<std::string, std::function<int()>> runners;
  for (auto& [name, setup] : kiln::tools::CommandRegistry::all()) runners[name] = setup(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto* sub : app.get_subcommands()) return runners.at(sub->get_name())();
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
