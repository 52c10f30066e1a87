#pragma once
// kiln: include this one header to use the library.
#include "core/dtype.h"
#include "core/device.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/random.h"
#include "core/tensor.h"
#include "autograd/grad_mode.h"
#include "ops/ops.h"
#include "ops/autocast.h"
