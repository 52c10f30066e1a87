// auto_model: a non-BERT family through kiln's Auto layer (docs/tutorial.md,
// section 8). Builds an XLM-RoBERTa-shaped sentence classifier for the real
// XLM-R tokenizer, trains it on two sentences until it tells them apart,
// saves it as a Hugging Face directory (transformers'
// XLMRobertaForSequenceClassification loads it) and loads it back by its
// config.json alone.
//
// usage: auto_model TOKENIZER_DIR OUT_DIR
// Exits non-zero when the reloaded model does not give the trained logits.
#include <kiln/kiln.h>

#include <cstdio>
#include <string>
#include <vector>

using kiln::Tensor;
namespace nn = kiln::nn;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: auto_model TOKENIZER_DIR OUT_DIR\n");
    return 2;
  }
  try {
    const auto tok = kiln::data::Tokenizer::from_pretrained(argv[1]);
    // [auto-config]
    // config.json's fields; model_type picks the family (nn/model_family.h)
    kiln::BertConfig config;
    config.model_type = "xlm-roberta";
    config.vocab_size = static_cast<int64_t>(tok.vocab_size());
    config.hidden_size = 64;
    config.num_hidden_layers = 2;
    config.num_attention_heads = 2;
    config.intermediate_size = 128;
    config.max_position_embeddings = 66;  // 64 tokens after the padding offset
    config.type_vocab_size = 1;
    config.pad_token_id = 1;
    config.architectures = {"XLMRobertaForSequenceClassification"};
    kiln::manual_seed(0);
    std::shared_ptr<nn::SequenceClassifier> model = nn::AutoModelForSequenceClassification::from_config(config, 2);
    // [auto-config]

    // two sentences, padded with <pad> (id 1), labels 1 and 0
    const std::vector<std::string> texts = {"What a wonderful film.", "A dull, tiresome mess."};
    std::vector<std::vector<int32_t>> ids;
    size_t T = 0;
    for (const std::string& t : texts) {
      ids.push_back(tok.encode(t).ids);
      T = std::max(T, ids.back().size());
    }
    std::vector<int64_t> flat, mask;
    for (const auto& row : ids)
      for (size_t i = 0; i < T; ++i) {
        flat.push_back(i < row.size() ? row[i] : 1);
        mask.push_back(i < row.size());
      }
    const int64_t B = static_cast<int64_t>(texts.size()), Tn = static_cast<int64_t>(T);
    const Tensor input_ids = kiln::tensor_from(flat, {B, Tn}), attention_mask = kiln::tensor_from(mask, {B, Tn});
    const Tensor labels = kiln::tensor_from(std::vector<int64_t>{1, 0}, {B});

    // [auto-train]
    kiln::optim::AdamWOptions adam;
    adam.lr = 1e-3;
    kiln::optim::AdamW opt(model->parameters(), adam);
    for (int step = 1; step <= 30; ++step) {
      nn::ClassificationOutput out = model->forward(input_ids, attention_mask, Tensor(), labels);
      opt.zero_grad();
      out.loss.backward();
      opt.step();
      if (step % 10 == 0) std::printf("step %d  loss %.4f\n", step, out.loss.item<double>());
    }
    model->eval();
    nn::save_pretrained(*model, config, argv[2]);  // config.json + model.safetensors
    // by config.json alone: the family from model_type, the head from the class asked for
    auto loaded = nn::AutoModelForSequenceClassification::from_pretrained(argv[2], 2);
    // [auto-train]
    loaded->eval();
    kiln::NoGradGuard no_grad;
    const Tensor a = model->forward(input_ids, attention_mask).logits;
    const Tensor b = loaded->forward(input_ids, attention_mask).logits;
    const double diff = kiln::amax(kiln::abs(kiln::sub(a, b))).item<double>();
    const std::vector<int64_t> predicted = kiln::argmax(b, 1).to_vector<int64_t>();
    std::printf("auto_model: %s, predicted %lld %lld, reload differs by %.3g\n", nn::model_type_of(argv[2]).c_str(),
                static_cast<long long>(predicted[0]), static_cast<long long>(predicted[1]), diff);
    return diff == 0.0 && predicted[0] == 1 && predicted[1] == 0 ? 0 : 1;
  } catch (const kiln::Error& err) {
    std::fprintf(stderr, "auto_model: %s\n", err.what());
    return 1;
  }
}
