// Model configs small enough for unit tests, shared by the test files.
#pragma once

#include "kiln.h"

namespace kiln::testing {

// A BERT small enough for unit tests (2 layers of 16, vocabulary 50), no dropout.
inline BertConfig tiny_bert_config() {
  BertConfig c;
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 32;
  c.max_position_embeddings = 24;
  c.hidden_dropout_prob = 0.0;
  c.attention_probs_dropout_prob = 0.0;
  return c;
}

}  // namespace kiln::testing
