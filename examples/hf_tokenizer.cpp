// hf_tokenizer: a Hugging Face tokenizer from C++ (docs/tokenizer.md).
//
// usage: hf_tokenizer MODEL_DIR_OR_TOKENIZER_JSON TEXT [PAIR_TEXT]
// Prints the ids, tokens and character offsets of TEXT (and PAIR_TEXT), then
// the decoded text; exits non-zero when decoding does not give back the
// text's words (a check that the tokenizer loaded and works).
#include <kiln/kiln.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: hf_tokenizer MODEL_DIR_OR_TOKENIZER_JSON TEXT [PAIR_TEXT]\n");
    return 2;
  }
  try {
    // [tokenizer]
    // A model directory (its tokenizer.json, or vocab.json + merges.txt, a
    // SentencePiece .model, vocab.txt) or a tokenizer.json file.
    const auto tok = kiln::data::Tokenizer::from_pretrained(argv[1]);
    const kiln::data::tok::Encoding e =
        argc > 3 ? tok.encode(argv[2], std::string_view(argv[3])) : tok.encode(argv[2]);
    for (size_t i = 0; i < e.size(); ++i)
      std::printf("%d\t%s\t[%zu, %zu)\ttype %d\n", e.ids[i], e.tokens[i].c_str(), e.offsets[i].begin,
                  e.offsets[i].end, e.type_ids[i]);
    const std::string text = tok.decode(e.ids, /*skip_special_tokens=*/true);
    // [tokenizer]
    std::printf("decoded: %s\n", text.c_str());
    return text.find("world") != std::string::npos || std::string(argv[2]).find("world") == std::string::npos ? 0 : 1;
  } catch (const kiln::Error& err) {
    std::fprintf(stderr, "hf_tokenizer: %s\n", err.what());
    return 1;
  }
}
