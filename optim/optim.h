// kiln optimizers, learning-rate schedules and gradient clipping.
#pragma once

#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/grad_scaler.h"
#include "optim/lamb.h"
#include "optim/optimizer.h"
#include "optim/param_groups.h"
#include "optim/scheduler.h"
#include "optim/sgd.h"
