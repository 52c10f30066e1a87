#include "tools/args_file.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_util.h"

namespace kiln::tools {

namespace {

// The file named by --args-file FILE or --args-file=FILE, or "".
std::string args_file_of(const std::vector<std::string>& args) {
  const std::string flag = "--args-file";
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == flag) {
      KILN_CHECK(i + 1 < args.size(), flag, " needs a file name");
      return args[i + 1];
    }
    if (args[i].rfind(flag + "=", 0) == 0) return args[i].substr(flag.size() + 1);
  }
  return "";
}

}  // namespace

std::vector<std::string> expand_args_file(const CLI::App& app, std::vector<std::string> args) {
  if (args.empty()) return args;
  const CLI::App* sub = nullptr;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
    if (s->get_name() == args[0]) sub = s;
  if (sub == nullptr) return args;
  const std::string file = args_file_of(args);
  if (file.empty()) return args;

  // Note [Bounded input] and [Bounded JSON]: a regular file of at most kMaxArgsFileBytes.
  JsonLimits limits;
  limits.max_bytes = kMaxArgsFileBytes;
  const nlohmann::json j = read_json_file(file, "--args-file " + file, limits);
  KILN_CHECK(j.is_object(), "--args-file ", file, ": not a JSON object");

  std::vector<std::string> flags;
  for (const auto& [key, value] : j.items()) {
    std::string name = key;
    for (char& ch : name)
      if (ch == '_') ch = '-';
    const CLI::Option* opt = sub->get_option_no_throw("--" + name);
    KILN_CHECK(opt != nullptr && name != "args-file", "--args-file ", file, ": '", key, "' is not a flag of kiln ",
               sub->get_name());
    const bool takes_no_value = opt->get_expected_min() == 0;
    if (value.is_boolean()) {
      if (takes_no_value) {
        if (value.get<bool>()) flags.push_back("--" + name);
        continue;
      }
      flags.push_back("--" + name);
      flags.push_back(value.get<bool>() ? "true" : "false");
    } else if (value.is_string() || value.is_number()) {
      KILN_CHECK(!takes_no_value, "--args-file ", file, ": '", key, "' is an on/off flag; give true or false");
      flags.push_back("--" + name);
      flags.push_back(value.is_string() ? value.get<std::string>() : value.dump());
    } else {
      fail("--args-file ", file, ": '", key, "' must be a string, a number or true/false");
    }
  }
  args.insert(args.begin() + 1, flags.begin(), flags.end());
  return args;
}

}  // namespace kiln::tools
