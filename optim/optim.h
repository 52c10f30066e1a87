// kiln optimizers, learning-rate schedules and gradient clipping.
#pragma once

#include "kiln/optim/adamw.h"
#include "kiln/optim/clip_grad.h"
#include "kiln/optim/grad_scaler.h"
#include "kiln/optim/lamb.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/param_groups.h"
#include "kiln/optim/scheduler.h"
#include "kiln/optim/sgd.h"
