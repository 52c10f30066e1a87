// Hostile input to every file reader (Notes [Bounded input] and [Bounded
// JSON], core/file_util.h and core/json_util.h): FIFOs and directories are
// refused before they can block, JSON is bounded in size and depth (the
// parse stops at the limit, costing no memory), duplicate keys are errors.
// Readers with a suite of their own (BertConfig, SafeTensors, Tokenizer,
// FinetuneData) are also tested there.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/file_util.h"
#include "core/json_util.h"
#include "hostile_util.h"
#include "nn/hf_checkpoint.h"
#include "test_util.h"
#include "train/metric_log.h"

#ifdef KILN_TEST_ARGS_FILE
#include "tools/args_file.h"
#endif

namespace kiln {
namespace {

using testing::ScratchPath;

std::string nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(BoundedJson, DepthLimitIsExact) {
  EXPECT_EQ(parse_json_bounded(nested(64), "t.json").dump().size(), 128u);  // 64 levels: accepted
  EXPECT_KILN_ERROR(parse_json_bounded(nested(65), "t.json"), "t.json: JSON nested deeper than 64 levels");
  EXPECT_KILN_ERROR(parse_json_bounded("{\"a\":" + nested(64) + "}", "t.json"), "nested deeper than 64");
  JsonLimits shallow;
  shallow.max_depth = 2;
  EXPECT_NO_THROW(parse_json_bounded("{\"a\":[1]}", "t.json", shallow));
  EXPECT_KILN_ERROR(parse_json_bounded("{\"a\":[[1]]}", "t.json", shallow), "nested deeper than 2 levels");
}

TEST(BoundedJson, DeepNestingStopsTheParseAtOnce) {
  // 8 MiB of '[' cost nlohmann ~80 bytes a level (600+ MiB) when the parse ran on to the end.
  EXPECT_KILN_ERROR_BOUNDED(parse_json_bounded(std::string(8 << 20, '['), "deep.json", {uint64_t{1} << 30}),
                            "deep.json: JSON nested deeper than 64 levels", 60, 64);
}

TEST(BoundedJson, SizeNulAndSyntax) {
  JsonLimits small;
  small.max_bytes = 10;
  EXPECT_KILN_ERROR(parse_json_bounded("[1,2,3,4,5,6]", "t.json", small),
                    "t.json: JSON text is 13 bytes, over the limit of 10 bytes");
  EXPECT_NO_THROW(parse_json_bounded("[1,2,3,4]", "t.json", small));
  EXPECT_KILN_ERROR(parse_json_bounded(std::string("{}\0", 3), "t.json"), "t.json: not valid JSON: NUL byte at offset 2");
  EXPECT_KILN_ERROR(parse_json_bounded("{\"a\":", "t.json"), "t.json: not valid JSON: [json.exception.parse_error");
}

TEST(BoundedJson, DuplicateKeys) {
  EXPECT_KILN_ERROR(parse_json_bounded("{\"a\":1,\"a\":2}", "t.json"), "t.json: duplicate key 'a' at the top level");
  EXPECT_KILN_ERROR(parse_json_bounded("{\"a\":{\"b\":1,\"b\":1}}", "t.json"), "duplicate key 'b' in a nested object");
  EXPECT_KILN_ERROR(parse_json_bounded("[{\"b\":1},{\"c\":1,\"c\":2}]", "t.json"), "duplicate key 'c'");
  // The same key in sibling or nested objects is no duplicate.
  EXPECT_NO_THROW(parse_json_bounded("[{\"b\":1},{\"b\":2,\"c\":{\"b\":3}}]", "t.json"));
  JsonLimits lax;
  lax.reject_duplicate_keys = false;
  EXPECT_EQ(parse_json_bounded("{\"a\":1,\"a\":2}", "t.json", lax)["a"], 2);
  const nlohmann::ordered_json o = parse_ordered_json_bounded("{\"z\":1,\"a\":2}", "t.json");
  EXPECT_EQ(o.begin().key(), "z");
  EXPECT_KILN_ERROR(parse_ordered_json_bounded("{\"z\":1,\"z\":2}", "t.json"), "duplicate key 'z'");
}

TEST(BoundedInput, RegularFilesOnly) {
  ScratchPath dir("hostile");
  const std::string ok = dir.write("ok.json", "{\"a\": [1, 2]}");
  EXPECT_EQ(read_json_file(ok, ok)["a"][1], 2);
  EXPECT_EQ(read_file_bounded(ok, ok, 13), "{\"a\": [1, 2]}");
  EXPECT_KILN_ERROR(read_file_bounded(ok, "x.json", 12), "x.json: file is 13 bytes, over the limit of 12 bytes");
  JsonLimits small;
  small.max_bytes = 5;
  EXPECT_KILN_ERROR(read_json_file(ok, "x.json", small), "x.json: file is 13 bytes, over the limit of 5 bytes");
  EXPECT_KILN_ERROR(read_json_file(dir / "missing.json", "m.json"), "m.json: cannot open: No such file or directory");
  EXPECT_KILN_ERROR(read_json_file(dir.path().string(), "d"), "d: is not a regular file (a directory)");
  EXPECT_KILN_ERROR(read_file_bounded("/dev/null", "null", kNoByteLimit), "is not a regular file (a character device)");
  EXPECT_KILN_ERROR(check_regular_file(dir.path().string(), "d"), "d: is not a regular file (a directory)");
  const std::string fifo = dir.fifo("pipe.json");
  EXPECT_FIFO_REFUSED(read_json_file(fifo, fifo));
  EXPECT_FIFO_REFUSED(read_file_bounded(fifo, fifo, kNoByteLimit));
}

TEST(BoundedInput, ModelDirectoryFilesMayBeFifos) {
  ScratchPath dir("hostile");
  dir.fifo("config.json");
  EXPECT_FIFO_REFUSED(nn::load_config(dir.path().string()));
  const std::string weights = dir.fifo("weights.safetensors");
  EXPECT_FIFO_REFUSED(nn::load_safetensors(weights));
}

TEST(BoundedInput, MetricsJsonl) {
  ScratchPath dir("hostile");
  const std::string fifo = dir.fifo("metrics.jsonl");
  EXPECT_FIFO_REFUSED(train::read_metrics_jsonl(fifo));
  const std::string deep = dir.write("deep.jsonl", "{\"step\": 1, \"loss\": 2}\n{\"step\": 2, \"x\": " + nested(100) + "}\n");
  EXPECT_KILN_ERROR(train::read_metrics_jsonl(deep), "line 2: JSON nested deeper than 64 levels");
  const std::string dup = dir.write("dup.jsonl", "{\"step\": 1, \"loss\": 2, \"loss\": 3}\n");
  EXPECT_KILN_ERROR(train::read_metrics_jsonl(dup), "line 1: duplicate key 'loss'");
}

#ifdef KILN_TEST_ARGS_FILE
// A `kiln pretrain` with --lr, --resume and --args-file, as tools/cmd_train.cpp registers them.
struct ArgsApp {
  CLI::App app;
  double lr = 0;
  bool resume = false;
  std::string args_file;
  ArgsApp() {
    CLI::App* sub = app.add_subcommand("pretrain");
    sub->add_option("--lr", lr);
    sub->add_flag("--resume", resume);
    sub->add_option("--args-file", args_file);
  }
  std::vector<std::string> expand(const std::string& file) const {
    return tools::expand_args_file(app, {"pretrain", "--args-file", file});
  }
};

TEST(ArgsFile, ExpandsFlagsFromJson) {
  ScratchPath dir("hostile");
  ArgsApp a;
  const std::string file = dir.write("args.json", "{\"lr\": 0.5, \"resume\": true}");
  EXPECT_EQ(a.expand(file), (std::vector<std::string>{"pretrain", "--lr", "0.5", "--resume", "--args-file", file}));
  EXPECT_KILN_ERROR(a.expand(dir.write("list.json", "[1]")), "list.json: not a JSON object");
  EXPECT_KILN_ERROR(a.expand(dir.write("bad.json", "{\"learning_rate\": 1}")), "'learning_rate' is not a flag");
}

TEST(ArgsFile, HostileFilesAreRefused) {
  ScratchPath dir("hostile");
  ArgsApp a;
  EXPECT_KILN_ERROR(a.expand(dir / "missing.json"), "--args-file", "missing.json: cannot open");
  EXPECT_KILN_ERROR(a.expand(dir.write("dup.json", "{\"lr\": 1, \"lr\": 2}")), "dup.json: duplicate key 'lr'");
  EXPECT_KILN_ERROR(a.expand(dir.write("deep.json", "{\"lr\": " + nested(1000) + "}")),
                    "deep.json: JSON nested deeper than 64 levels");
  EXPECT_KILN_ERROR(a.expand(dir.write("big.json", "{\"lr\": 1" + std::string(2 << 20, ' ') + "}")),
                    "big.json: file is 2097161 bytes, over the limit of 1048576 bytes");
  EXPECT_KILN_ERROR(a.expand(dir.path().string()), "is not a regular file (a directory)");
  const std::string fifo = dir.fifo("args.json");
  EXPECT_FIFO_REFUSED(a.expand(fifo));
}
#endif

}  // namespace
}  // namespace kiln
