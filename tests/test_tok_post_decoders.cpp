// HF tokenizers' post-processors (data/tokenizer/post_processors.h) and
// decoders (data/tokenizer/decoders.h).
//
// The parity tests run tests/reference/tok_post_decoders_reference.py
// (KILN_PYTHON) once, which writes into the build directory the Encodings that
// BERT's WordPiece and GPT-2's byte-level BPE give real and adversarial lines
// (untruncated, and truncated with overflowing windows), token lists from
// GPT-2, XLM-R and BERT and adversarial ones, and HF's PostProcessor.process /
// Decoder.decode of each over many configurations. Here the same Encodings are
// rebuilt from the file and every field of every result (overflowing windows
// included) must equal HF's; where HF fails (a Rust panic) or rejects a
// config, kiln must throw kiln::Error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "kiln/data/tokenizer/decoders.h"
#include "kiln/data/tokenizer/post_processors.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using namespace kiln::data::tok;
using kiln::testing::env_or;
using kiln::testing::quoted;

// ---- helpers ------------------------------------------------------------------------------

Encoding encoding_from(const Json& j) {
  Encoding e;
  e.ids = j.at("ids").get<std::vector<int32_t>>();
  e.type_ids = j.at("type_ids").get<std::vector<int32_t>>();
  e.tokens = j.at("tokens").get<std::vector<std::string>>();
  for (const Json& o : j.at("offsets")) e.offsets.push_back({o[0].get<size_t>(), o[1].get<size_t>()});
  e.special_tokens_mask = j.at("special_tokens_mask").get<std::vector<int32_t>>();
  e.attention_mask = j.at("attention_mask").get<std::vector<int32_t>>();
  e.word_ids = j.at("word_ids").get<std::vector<int32_t>>();
  e.sequence_ids = j.at("sequence_ids").get<std::vector<int32_t>>();
  for (const Json& o : j.at("overflowing")) e.overflowing.push_back(encoding_from(o));
  return e;
}

template <typename T>
std::string show(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    if constexpr (std::is_same_v<T, std::string>)
      s += Json(v[i]).dump();
    else if constexpr (std::is_same_v<T, Span>)
      s += kiln::detail::str_cat("(", v[i].begin, ", ", v[i].end, ")");
    else
      s += std::to_string(v[i]);
  }
  return s + "]";
}

// "" when equal, else the first difference (path names the window).
std::string diff(const Encoding& got, const Encoding& want, const std::string& path = "") {
  auto field = [&](const char* name, const auto& g, const auto& w) -> std::string {
    if (g == w) return "";
    return path + name + ": kiln " + show(g) + "\n    hf   " + show(w);
  };
  for (const std::string& d :
       {field("ids", got.ids, want.ids), field("type_ids", got.type_ids, want.type_ids),
        field("tokens", got.tokens, want.tokens), field("offsets", got.offsets, want.offsets),
        field("special_tokens_mask", got.special_tokens_mask, want.special_tokens_mask),
        field("attention_mask", got.attention_mask, want.attention_mask),
        field("word_ids", got.word_ids, want.word_ids),
        field("sequence_ids", got.sequence_ids, want.sequence_ids)})
    if (!d.empty()) return d;
  if (got.overflowing.size() != want.overflowing.size())
    return path + "overflowing: kiln has " + std::to_string(got.overflowing.size()) +
           " windows, hf " + std::to_string(want.overflowing.size());
  for (size_t i = 0; i < got.overflowing.size(); ++i) {
    std::string d = diff(got.overflowing[i], want.overflowing[i],
                         path + "overflowing[" + std::to_string(i) + "].");
    if (!d.empty()) return d;
  }
  return "";
}

size_t count_windows(const Encoding& e) {
  size_t n = e.overflowing.size();
  for (const Encoding& o : e.overflowing) n += count_windows(o);
  return n;
}

Encoding from_tokens(std::vector<std::pair<std::string, Span>> toks, std::vector<int32_t> ids) {
  Encoding e;
  for (size_t i = 0; i < toks.size(); ++i) {
    e.ids.push_back(ids[i]);
    e.type_ids.push_back(0);
    e.tokens.push_back(toks[i].first);
    e.offsets.push_back(toks[i].second);
    e.special_tokens_mask.push_back(0);
    e.attention_mask.push_back(1);
    e.word_ids.push_back(static_cast<int32_t>(i));
    e.sequence_ids.push_back(0);
  }
  return e;
}

std::unique_ptr<PostProcessor> processor(const std::string& j) {
  return post_processor_from_json(Json::parse(j), "post_processor");
}
std::unique_ptr<Decoder> decoder(const std::string& j) {
  return decoder_from_json(Json::parse(j), "decoder");
}
using Toks = std::vector<std::string>;

// ---- hand-checked post-processing -------------------------------------------------------------

TEST(TokPostProcessors, BertSingleAndPairAsHfsUnitTest) {
  const auto p = processor(R"({"type":"BertProcessing","sep":["[SEP]",102],"cls":["[CLS]",101]})");
  EXPECT_EQ(p->added_tokens(false), 2u);
  EXPECT_EQ(p->added_tokens(true), 3u);
  const Encoding a = from_tokens({{"Hello", {0, 5}}, {"there", {6, 11}}}, {12, 14});
  const Encoding b = from_tokens({{"pair", {0, 4}}}, {15});
  const Encoding s = p->process(a, std::nullopt, true);
  EXPECT_EQ(s.ids, (std::vector<int32_t>{101, 12, 14, 102}));
  EXPECT_EQ(s.special_tokens_mask, (std::vector<int32_t>{1, 0, 0, 1}));
  EXPECT_EQ(s.offsets, (std::vector<Span>{{0, 0}, {0, 5}, {6, 11}, {0, 0}}));
  EXPECT_EQ(s.sequence_ids, (std::vector<int32_t>{-1, 0, 0, -1}));
  EXPECT_EQ(s.word_ids, (std::vector<int32_t>{-1, 0, 1, -1}));
  const Encoding q = p->process(a, b, true);
  EXPECT_EQ(q.ids, (std::vector<int32_t>{101, 12, 14, 102, 15, 102}));
  EXPECT_EQ(q.type_ids, (std::vector<int32_t>{0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(q.sequence_ids, (std::vector<int32_t>{-1, 0, 0, -1, 1, -1}));
  const Encoding n = p->process(a, b, false);
  EXPECT_EQ(n.ids, (std::vector<int32_t>{12, 14, 15}));
  EXPECT_EQ(n.type_ids, (std::vector<int32_t>{0, 0, 1}));
  EXPECT_EQ(n.sequence_ids, (std::vector<int32_t>{0, 0, 1}));
}

TEST(TokPostProcessors, ByteLevelTrimsSpacesFromOffsets) {
  // GPT-2's "  a  b" with add_prefix_space: "Ġ" (0,1) "Ġa" (1,3) "ĠĠ" (3,5) "Ġb" (5,7).
  Encoding e = from_tokens({{"\u0120", {0, 1}}, {"\u0120a", {1, 3}}, {"\u0120\u0120", {3, 5}},
                            {"\u0120b", {5, 7}}},
                           {1, 2, 3, 4});
  Encoding t = e;
  trim_byte_level_offsets(t, true);
  EXPECT_EQ(t.offsets, (std::vector<Span>{{0, 0}, {2, 3}, {5, 5}, {6, 7}}));
  t = e;
  trim_byte_level_offsets(t, false);
  EXPECT_EQ(t.offsets, (std::vector<Span>{{1, 1}, {2, 3}, {5, 5}, {6, 7}}));
}

TEST(TokPostProcessors, TemplateOverflowWindowsGetTheirSpecialTokens) {
  const auto p = processor(
      R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"[CLS]","type_id":0}},)"
      R"({"Sequence":{"id":"A","type_id":0}}],"pair":[{"Sequence":{"id":"A","type_id":0}},)"
      R"({"Sequence":{"id":"B","type_id":1}}],"special_tokens":{"[CLS]":{"id":"[CLS]",)"
      R"("ids":[101,7],"tokens":["[CLS]","x"]}}})");
  EXPECT_EQ(p->added_tokens(false), 2u);
  EXPECT_EQ(p->added_tokens(true), 0u);
  Encoding a = from_tokens({{"a", {0, 1}}, {"b", {2, 3}}, {"c", {4, 5}}}, {1, 2, 3});
  truncate_encoding(a, 2, 0, TruncateSide::kRight);
  const Encoding s = p->process(a, std::nullopt, true);
  EXPECT_EQ(s.ids, (std::vector<int32_t>{101, 7, 1, 2}));
  ASSERT_EQ(s.overflowing.size(), 1u);
  EXPECT_EQ(s.overflowing[0].ids, (std::vector<int32_t>{101, 7, 3}));
  EXPECT_EQ(s.overflowing[0].sequence_ids, (std::vector<int32_t>{-1, -1, 0}));
  // A pair: every window of one side with the other (HF's merge_with).
  const Encoding q = p->process(a, a, true);
  EXPECT_EQ(q.ids, (std::vector<int32_t>{1, 2, 1, 2}));
  EXPECT_EQ(count_windows(q), 5u);  // 3, two of them with a nested one (HF)
}

// Note [Single-sequence fast path]: a processor with a SingleLayout gives a
// single encoding the same result as the general flow, which the same
// processor alone in a Sequence takes (Sequence has no layout).
TEST(TokPostProcessors, SingleSequenceFastPathEqualsTheGeneralFlow) {
  const std::vector<std::string> configs = {
      R"({"type":"BertProcessing","sep":["[SEP]",102],"cls":["[CLS]",101]})",
      R"({"type":"RobertaProcessing","sep":["</s>",2],"cls":["<s>",0],"trim_offsets":true,)"
      R"("add_prefix_space":true})",
      R"({"type":"RobertaProcessing","sep":["</s>",2],"cls":["<s>",0],"trim_offsets":false,)"
      R"("add_prefix_space":false})",
      R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})",
      R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false,"use_regex":true})",
      // Multi-token specials on both sides, type ids that differ.
      R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"[X]","type_id":3}},)"
      R"({"Sequence":{"id":"A","type_id":1}},{"SpecialToken":{"id":"[Y]","type_id":2}},)"
      R"({"SpecialToken":{"id":"[X]","type_id":4}}],"pair":[{"Sequence":{"id":"A","type_id":0}},)"
      R"({"Sequence":{"id":"B","type_id":1}}],"special_tokens":{"[X]":{"id":"[X]",)"
      R"("ids":[101,7],"tokens":["[X]","x"]},"[Y]":{"id":"[Y]","ids":[9],"tokens":["[Y]"]}}})",
      // Only the sequence; only a tail.
      R"({"type":"TemplateProcessing","single":[{"Sequence":{"id":"A","type_id":5}}],)"
      R"("pair":[{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{}})",
      R"({"type":"TemplateProcessing","single":[{"Sequence":{"id":"A","type_id":0}},)"
      R"({"SpecialToken":{"id":"</s>","type_id":0}}],"pair":[{"Sequence":{"id":"A","type_id":0}}],)"
      R"("special_tokens":{"</s>":{"id":"</s>","ids":[2],"tokens":["</s>"]}}})",
  };
  // Spaces and 'Ġ' for the trimming; masks, type ids and word ids that the
  // processors must overwrite or keep; and an empty encoding.
  Encoding a = from_tokens({{"\u0120Hello", {0, 6}}, {" there ", {6, 13}}, {"x", {13, 14}}},
                           {12, 14, 16});
  a.type_ids = {1, 0, 1};
  a.special_tokens_mask = {0, 1, 0};
  a.attention_mask = {1, 0, 1};
  a.word_ids = {0, -1, 2};
  a.sequence_ids = {3, 3, 3};
  for (const std::string& c : configs) {
    const auto fast = processor(c);
    const auto general = processor(R"({"type":"Sequence","processors":[)" + c + "]}");
    const auto* hf = dynamic_cast<const HfPostProcessor*>(fast.get());
    ASSERT_NE(hf, nullptr) << c;
    EXPECT_NE(hf->single_layout(), nullptr) << c;
    for (const Encoding& e : {a, Encoding{}})
      for (bool add : {true, false}) {
        const Encoding want = general->process(e, std::nullopt, add);
        EXPECT_EQ(diff(fast->process(e, std::nullopt, add), want), "") << c << " add=" << add;
      }
  }
  // $A twice, or a single template naming $B: no layout (the general flow).
  for (const std::string& single :
       {std::string(R"([{"Sequence":{"id":"A","type_id":0}},{"Sequence":{"id":"A","type_id":1}}])"),
        std::string(R"([{"Sequence":{"id":"B","type_id":0}}])")}) {
    const auto p = processor(R"({"type":"TemplateProcessing","single":)" + single +
                             R"(,"pair":[{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{}})");
    EXPECT_EQ(dynamic_cast<const HfPostProcessor&>(*p).single_layout(), nullptr) << single;
  }
}

TEST(TokPostProcessors, DefaultProcessAsHfWithoutAPostProcessor) {
  // HF (no post-processor, only_first truncation to 3): encode("a b c", "c")
  // gives ids [1, 2, 3], sequence ids [0, 0, 1], one window [3, 3] with
  // sequence ids [0, 0]; encode("a b c a") truncated to 3: [0, 0, 0], window [0].
  Encoding a = from_tokens({{"a", {0, 1}}, {"b", {2, 3}}, {"c", {4, 5}}}, {1, 2, 3});
  truncate_encoding(a, 2, 0, TruncateSide::kRight);
  const Encoding b = from_tokens({{"c", {0, 1}}}, {3});
  const Encoding q = default_post_process(a, b);
  EXPECT_EQ(q.ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(q.sequence_ids, (std::vector<int32_t>{0, 0, 1}));
  ASSERT_EQ(q.overflowing.size(), 1u);
  EXPECT_EQ(q.overflowing[0].ids, (std::vector<int32_t>{3, 3}));
  EXPECT_EQ(q.overflowing[0].sequence_ids, (std::vector<int32_t>{0, 0}));
  Encoding s = from_tokens({{"a", {0, 1}}, {"b", {2, 3}}, {"c", {4, 5}}, {"a", {6, 7}}}, {1, 2, 3, 1});
  truncate_encoding(s, 3, 0, TruncateSide::kRight);
  const Encoding one = default_post_process(s, std::nullopt);
  EXPECT_EQ(one.sequence_ids, (std::vector<int32_t>{0, 0, 0}));
  ASSERT_EQ(one.overflowing.size(), 1u);
  EXPECT_EQ(one.overflowing[0].sequence_ids, (std::vector<int32_t>{0}));
}

TEST(TokPostProcessors, JsonErrorsNameTheField) {
  EXPECT_KILN_ERROR(processor(R"({"type":"Foo"})"), "post_processor",
                    "unknown post-processor type \"Foo\"");
  EXPECT_KILN_ERROR(processor(R"({"type":"BertProcessing","sep":["[SEP]",1.5],"cls":["a",1]})"),
                    "post_processor.sep[1]", "expected an integer");
  EXPECT_KILN_ERROR(processor(R"({"type":"BertProcessing","sep":["[SEP]"],"cls":["a",1]})"),
                    "post_processor.sep", "expected [token, id]");
  EXPECT_KILN_ERROR(processor(R"({"type":"ByteLevel","add_prefix_space":true})"), "trim_offsets");
  EXPECT_KILN_ERROR(
      processor(R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"[CLS]","type_id":0}}],)"
                R"("pair":[],"special_tokens":{}})"),
      "single template names the special token \"[CLS]\"");
  EXPECT_KILN_ERROR(
      processor(R"({"type":"TemplateProcessing","single":[],"pair":[],)"
                R"("special_tokens":{"X":{"id":"X","ids":[1,2],"tokens":["x"]}}})"),
      "post_processor.special_tokens.X", "2 ids but 1 tokens");
  EXPECT_KILN_ERROR(
      processor(R"({"type":"TemplateProcessing","single":["$A"],"pair":[],"special_tokens":{}})"),
      "post_processor.single[0]", "expected an object");
  EXPECT_KILN_ERROR(
      processor(R"({"type":"TemplateProcessing","single":[{"Sequence":{"id":"C","type_id":0}}],)"
                R"("pair":[],"special_tokens":{}})"),
      "unknown sequence \"C\"");
  EXPECT_KILN_ERROR(processor(R"({"type":"Sequence","processors":[{"type":"Bar"}]})"),
                    "post_processor.processors[0]", "\"Bar\"");
  EXPECT_KILN_ERROR(processor(R"([1])"), "post_processor", "expected an object");
  std::string deep = R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true})";
  for (int i = 0; i < 70; ++i) deep = R"({"type":"Sequence","processors":[)" + deep + "]}";
  EXPECT_KILN_ERROR(processor(deep), "nested more than 64");
}

TEST(TokPostProcessors, HostileInputsAreErrors) {
  // A single-sequence template using $B: HF panics when processing one sequence.
  const auto b_only = processor(
      R"({"type":"TemplateProcessing","single":[{"Sequence":{"id":"B","type_id":0}}],)"
      R"("pair":[{"Sequence":{"id":"A","type_id":0}},{"Sequence":{"id":"B","type_id":0}}],)"
      R"("special_tokens":{}})");
  const Encoding a = from_tokens({{"a", {0, 1}}}, {1});
  EXPECT_KILN_ERROR(b_only->process(a, std::nullopt, true), "uses $B");
  EXPECT_EQ(b_only->process(a, a, true).ids, (std::vector<int32_t>{1, 1}));
  // A malformed Encoding.
  Encoding bad = a;
  bad.tokens.clear();
  EXPECT_KILN_ERROR(b_only->process(a, bad, true), "malformed Encoding");
  // $A named 12 times with 40 windows: (41^12 windows in HF) stops at the budget.
  std::string pieces;
  for (int i = 0; i < 12; ++i) pieces += std::string(i ? "," : "") + R"({"Sequence":{"id":"A","type_id":0}})";
  const auto blowup = processor(R"({"type":"TemplateProcessing","single":[)" + pieces +
                                R"(],"pair":[],"special_tokens":{}})");
  std::vector<std::pair<std::string, Span>> toks;
  std::vector<int32_t> ids;
  for (int i = 0; i < 41; ++i) {
    toks.push_back({"t", {static_cast<size_t>(i), static_cast<size_t>(i + 1)}});
    ids.push_back(i);
  }
  Encoding many = from_tokens(toks, ids);
  truncate_encoding(many, 1, 0, TruncateSide::kRight);
  EXPECT_KILN_ERROR(blowup->process(many, std::nullopt, true), "overflowing windows");
}

// ---- hand-checked decoding --------------------------------------------------------------------

TEST(TokDecoders, RustReplaceAndCleanup) {
  EXPECT_EQ(rust_replace("ab", "", "-"), "-a-b-");
  EXPECT_EQ(rust_replace("\xC3\xA9x", "", "-"), "-\xC3\xA9-x-");
  EXPECT_EQ(rust_replace("", "", "-"), "-");
  EXPECT_EQ(rust_replace("aaa", "aa", "b"), "ba");
  EXPECT_EQ(wordpiece_cleanup("a . b ? c ' d do not x 's"), "a. b? c'd don't x's");
}

TEST(TokDecoders, HandCheckedCases) {
  EXPECT_EQ(decoder(R"({"type":"ByteFallback"})")
                ->decode({"<0x+A>", "<0x41>", "<0xE4>", "<0xB8>", "<0xAD>", "x", "<0xE4>", "<0xB8>", "y"}),
            "\nA\xE4\xB8\xADx\xEF\xBF\xBD\xEF\xBF\xBDy");
  EXPECT_EQ(decoder(R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true})")
                ->decode({"\u0120hello", "\u00e4\u00b8", "x", "\u00ad", "\xFF"}),
            " hello\xEF\xBF\xBDx\xC2\xAD\xEF\xBF\xBD");
  EXPECT_EQ(decoder(R"({"type":"Metaspace","replacement":"▁"})")->decode({"▁a▁b", "▁c"}), "ab c");
  EXPECT_EQ(decoder(R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"never"})")
                ->decode({"▁a▁b", "▁c"}),
            " a b c");
  EXPECT_EQ(decoder(R"({"type":"BPEDecoder","suffix":""})")->decode({"ab", "cd"}), " a b cd");
  EXPECT_EQ(decoder(R"({"type":"CTC","pad_token":"<pad>","word_delimiter_token":"|","cleanup":true})")
                ->decode({"<pad>", "h", "h", "e", "|", "l", "l", "<pad>", "l"}),
            "he ll");
  const auto strip = decoder(R"({"type":"Strip","content":"a","start":1,"stop":1})");
  EXPECT_EQ(strip->decode({"abca", "bb"}), "bcbb");
  EXPECT_KILN_ERROR(strip->decode({"a"}), "Strip decoder", "overlap");
  EXPECT_KILN_ERROR(decoder(R"({"type":"Strip","content":" ","start":0,"stop":1})")->decode({""}),
                    "Strip decoder", "runs past");
  EXPECT_EQ(decoder(R"({"type":"Sequence","decoders":[]})")->decode({"a", "b"}), "ab");
  // Ill-formed UTF-8 from a C++ caller is read as U+FFFD, never a crash.
  EXPECT_EQ(decoder(R"({"type":"Replace","pattern":{"String":"a"},"content":"b"})")->decode({"a\xC3"}),
            "b\xEF\xBF\xBD");
}

TEST(TokDecoders, JsonErrorsNameTheField) {
  EXPECT_KILN_ERROR(decoder(R"({"type":"Foo"})"), "decoder", "unknown decoder type \"Foo\"");
  EXPECT_KILN_ERROR(decoder(R"({})"), "decoder", "missing field \"type\"");
  EXPECT_KILN_ERROR(decoder(R"({"type":"ByteLevel","add_prefix_space":true})"), "decoder",
                    "trim_offsets");
  EXPECT_KILN_ERROR(decoder(R"({"type":"Metaspace","replacement":"▁","add_prefix_space":false})"),
                    "add_prefix_space does not match declared prepend_scheme");
  EXPECT_KILN_ERROR(decoder(R"({"type":"Strip","content":"ab","start":1,"stop":0})"),
                    "decoder.content", "single character");
  EXPECT_KILN_ERROR(decoder(R"({"type":"Strip","content":" ","start":-1,"stop":0})"),
                    "decoder.start");
  EXPECT_KILN_ERROR(decoder(R"({"type":"Replace","pattern":{"Regex":"("},"content":"x"})"),
                    "decoder.pattern", "unmatched parenthesis");
  EXPECT_KILN_ERROR(decoder(R"({"type":"Sequence","decoders":[{"type":"Fuse"},{"type":"Bar"}]})"),
                    "decoder.decoders[1]", "\"Bar\"");
  std::string deep = R"({"type":"Fuse"})";
  for (int i = 0; i < 70; ++i) deep = R"({"type":"Sequence","decoders":[)" + deep + "]}";
  EXPECT_KILN_ERROR(decoder(deep), "nested more than 64");
}

// ---- parity with HF ---------------------------------------------------------------------------

struct Golden {
  std::vector<Encoding> encodings;
  std::vector<Toks> token_lists;
  std::vector<Json> records;
};

const Golden& golden() {
  static const Golden g = [] {
    const fs::path dir = fs::path(KILN_BINARY_DIR) / "tokenizer_golden";
    fs::create_directories(dir);
    const std::string out =
        (dir / ("post_decoders." + std::to_string(::getpid()) + ".jsonl")).string();
    const std::string cmd =
        quoted(env_or("KILN_PYTHON", KILN_DEFAULT_PYTHON)) + " " +
        quoted(std::string(KILN_SOURCE_DIR) + "/tests/reference/tok_post_decoders_reference.py") +
        " --data " + quoted(env_or("KILN_DATA", KILN_DEFAULT_DATA)) + " --output " + quoted(out);
    Golden r;
    if (std::system(cmd.c_str()) != 0) {
      ADD_FAILURE() << "reference script failed: " << cmd;
      return r;
    }
    std::ifstream in(out, std::ios::binary);
    std::string line;
    if (std::getline(in, line)) {
      const Json first = Json::parse(line);
      for (const Json& e : first.at("encodings")) r.encodings.push_back(encoding_from(e));
    }
    if (std::getline(in, line))
      r.token_lists = Json::parse(line).at("token_lists").get<std::vector<Toks>>();
    while (std::getline(in, line)) r.records.push_back(Json::parse(line));
    in.close();
    fs::remove(out);
    return r;
  }();
  return g;
}

TEST(TokPostProcessors, MatchHfOnRealEncodingsWithOverflow) {
  const Golden& g = golden();
  ASSERT_GT(g.encodings.size(), 40u);
  size_t configs = 0, rejected = 0, compared = 0, hf_failures = 0, windows = 0, failed = 0;
  for (const Json& rec : g.records) {
    if (!rec.contains("processor")) continue;
    const Json& cfg = rec["processor"];
    ++configs;
    if (rec.contains("load_error")) {
      ++rejected;
      EXPECT_TRUE(kiln::testing::throws_error(
          [&] { post_processor_from_json(cfg, "post_processor"); }, {}))
          << "HF rejects " << cfg.dump();
      continue;
    }
    std::unique_ptr<PostProcessor> p;
    try {
      p = post_processor_from_json(cfg, "post_processor");
    } catch (const std::exception& e) {
      ADD_FAILURE() << cfg.dump() << ": " << e.what();
      continue;
    }
    EXPECT_EQ(p->added_tokens(false), rec["added"][0].get<size_t>()) << cfg.dump();
    EXPECT_EQ(p->added_tokens(true), rec["added"][1].get<size_t>()) << cfg.dump();
    size_t mismatches = 0;
    for (const Json& c : rec["cases"]) {
      const Encoding& a = g.encodings.at(c["a"].get<size_t>());
      std::optional<Encoding> b;
      if (!c["b"].is_null()) b = g.encodings.at(c["b"].get<size_t>());
      const bool add = c["add"].get<bool>();
      const std::string what = cfg.dump().substr(0, 300) + " a=" + c["a"].dump() +
                               " b=" + c["b"].dump() + " add=" + (add ? "1" : "0");
      if (c["out"].contains("error")) {
        ++hf_failures;
        EXPECT_TRUE(kiln::testing::throws_error([&] { p->process(a, b, add); }, {}))
            << what << ": HF fails with " << c["out"]["error"];
        continue;
      }
      const Encoding want = encoding_from(c["out"]);
      Encoding got;
      try {
        got = p->process(a, b, add);
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": " << e.what();
        ++mismatches;
        continue;
      }
      ++compared;
      windows += count_windows(want);
      const std::string d = diff(got, want);
      if (!d.empty() && ++mismatches <= 3) ADD_FAILURE() << what << "\n  " << d;
    }
    if (mismatches) {
      ++failed;
      std::cout << "[post-processor parity] " << cfg.dump().substr(0, 200) << ": " << mismatches
                << " cases differ\n";
    }
  }
  std::cout << "[post-processor parity] " << configs << " configs, " << compared
            << " results compared (" << windows << " overflowing windows), " << rejected
            << " rejected configs, " << hf_failures << " HF failures, " << failed
            << " configs with mismatches\n";
  EXPECT_GT(configs, 40u);
  EXPECT_GT(compared, 4000u);
  EXPECT_GT(windows, 10000u);
  EXPECT_GT(rejected, 15u);
  EXPECT_GT(hf_failures, 100u);
}

TEST(TokDecoders, MatchHfOnRealAndAdversarialTokens) {
  const Golden& g = golden();
  ASSERT_GT(g.token_lists.size(), 300u);
  size_t configs = 0, rejected = 0, compared = 0, hf_failures = 0, failed = 0;
  for (const Json& rec : g.records) {
    if (!rec.contains("decoder")) continue;
    const Json& cfg = rec["decoder"];
    ++configs;
    if (rec.contains("load_error")) {
      ++rejected;
      EXPECT_TRUE(kiln::testing::throws_error([&] { decoder_from_json(cfg, "decoder"); }, {}))
          << "HF rejects " << cfg.dump();
      continue;
    }
    std::unique_ptr<Decoder> d;
    try {
      d = decoder_from_json(cfg, "decoder");
    } catch (const std::exception& e) {
      ADD_FAILURE() << cfg.dump() << ": " << e.what();
      continue;
    }
    const Json& results = rec["results"];
    EXPECT_EQ(results.size(), g.token_lists.size());
    size_t mismatches = 0;
    for (size_t k = 0; k < results.size() && k < g.token_lists.size(); ++k) {
      const Toks& toks = g.token_lists[k];
      const std::string what = cfg.dump() + " on " + Json(toks).dump().substr(0, 300);
      if (results[k].is_object()) {
        ++hf_failures;
        EXPECT_TRUE(kiln::testing::throws_error([&] { d->decode(toks); }, {}))
            << what << ": HF fails with " << results[k]["error"];
        continue;
      }
      std::string got;
      try {
        got = d->decode(toks);
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": " << e.what();
        ++mismatches;
        continue;
      }
      ++compared;
      const std::string want = results[k].get<std::string>();
      if (got != want && ++mismatches <= 3)
        ADD_FAILURE() << what << "\n  kiln: " << Json(got).dump(-1, ' ', false, Json::error_handler_t::replace)
                      << "\n  hf:   " << Json(want).dump();
    }
    if (mismatches) {
      ++failed;
      std::cout << "[decoder parity] " << cfg.dump() << ": " << mismatches << " lists differ\n";
    }
  }
  std::cout << "[decoder parity] " << configs << " configs, " << compared << " decodes compared, "
            << rejected << " rejected configs, " << hf_failures << " HF failures, " << failed
            << " configs with mismatches\n";
  EXPECT_GT(configs, 70u);
  EXPECT_GT(compared, 15000u);
  EXPECT_GT(rejected, 25u);
  EXPECT_GT(hf_failures, 50u);
}

}  // namespace
