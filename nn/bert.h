// BERT's modules moved to nn/models/bert.h beside the other families; this
// header stays for code that includes <kiln/nn/bert.h>.
#pragma once

#include "kiln/nn/models/bert.h"
