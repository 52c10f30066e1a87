// BertConfig moved to nn/models/bert_config.h beside the other families'
// configs; this header stays for code that includes <kiln/nn/bert_config.h>.
#pragma once

#include "kiln/nn/models/bert_config.h"
