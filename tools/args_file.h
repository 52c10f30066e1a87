// `--args-file FILE`: flag values from a JSON object, for any subcommand.
//
//   {"lr": 1e-4, "batch-size": 16, "resume": true, "train_file": "data.txt"}
//
// Keys are flag names without the leading dashes ('_' may stand for '-').
// Strings and numbers become the flag's value; true sets a flag that takes
// no value, false leaves it unset. The expanded flags are placed before the
// command line's own, and every option keeps the last value it is given, so
// the command line wins. An unknown key, a value of the wrong kind or a file
// that is not a JSON object is a kiln::Error naming the file and the key, and
// so is a file that is not a regular file (a FIFO), is over
// kMaxArgsFileBytes, nests deeper than 64 levels or repeats a key (Notes
// [Bounded input] and [Bounded JSON], core/file_util.h, core/json_util.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace kiln::tools {

inline constexpr uint64_t kMaxArgsFileBytes = uint64_t{1} << 20;  // 1 MiB

// args: the command line without the program name. Returns it with the
// chosen subcommand's --args-file contents spliced in after the subcommand.
std::vector<std::string> expand_args_file(const CLI::App& app, std::vector<std::string> args);

}  // namespace kiln::tools
