#pragma once
// kiln: include this one header to use the library, `#include <kiln/kiln.h>`.
//
// It includes every public header, and the list below is the public API:
// CMake installs exactly these files (under include/kiln/), and a header
// left off it stays internal to the build (Note [Package layout] in
// core/components.h). Public headers include each other as "kiln/...", so an
// installed header's includes resolve under the kiln/ prefix alone.

// version (CHANGELOG.md), tensors, devices, random numbers
#include "kiln/version.h"
#include "kiln/core/error.h"
#include "kiln/core/dtype.h"
#include "kiln/core/device.h"
#include "kiln/core/storage.h"
#include "kiln/core/tensor.h"
#include "kiln/core/op_scope.h"
#include "kiln/core/profiler.h"
#include "kiln/core/memory_summary.h"
#include "kiln/core/parallel.h"
#include "kiln/core/random.h"
#include "kiln/core/build_info.h"
#include "kiln/core/memory/allocator_stats.h"

// autograd
#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/node.h"
#include "kiln/autograd/record.h"

// ops
#include "kiln/ops/ops.h"
#include "kiln/ops/multi_tensor.h"
#include "kiln/ops/autocast.h"
#include "kiln/ops/fused.h"
#include "kiln/ops/decoder_ops.h"
#include "kiln/ops/activation_checkpoint.h"

// CUDA: streams, memory, copies (every call a clear error without the CUDA backend)
#include "kiln/cuda/stream.h"
#include "kiln/cuda/cuda.h"

// nn: modules, layers, BERT, checkpoints, generation
#include "kiln/nn/module.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/freeze.h"
#include "kiln/nn/lora.h"
#include "kiln/nn/rotary.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/models/bert_config.h"
#include "kiln/nn/bert_config.h"  // forwards to nn/models/bert_config.h
#include "kiln/nn/model_config.h"
#include "kiln/nn/model_size.h"
#include "kiln/nn/heads.h"
#include "kiln/nn/models/bert.h"
#include "kiln/nn/bert.h"  // forwards to nn/models/bert.h
#include "kiln/nn/models/roberta.h"
#include "kiln/nn/models/distilbert.h"
#include "kiln/nn/models/modernbert.h"
#include "kiln/nn/models/gpt2.h"
#include "kiln/nn/models/llama.h"
#include "kiln/nn/safetensors.h"
#include "kiln/nn/weight_files.h"
#include "kiln/nn/hf_checkpoint.h"
#include "kiln/nn/model_family.h"
#include "kiln/nn/auto.h"
#include "kiln/nn/generation.h"

// optim
#include "kiln/optim/optimizer.h"
#include "kiln/optim/sgd.h"
#include "kiln/optim/adamw.h"
#include "kiln/optim/lamb.h"
#include "kiln/optim/scheduler.h"
#include "kiln/optim/clip_grad.h"
#include "kiln/optim/grad_scaler.h"
#include "kiln/optim/param_groups.h"
#include "kiln/optim/optim.h"

// data: tokenizer, datasets, loaders, corpora
#include "kiln/data/tokenizer/string_id_map.h"
#include "kiln/data/tokenizer/vocab.h"
#include "kiln/data/tokenizer/basic_tokenizer.h"
#include "kiln/data/tokenizer/wordpiece.h"
#include "kiln/data/tokenizer/text_tokenizer.h"
#include "kiln/data/tokenizer/bert_tokenizer.h"
#include "kiln/data/tokenizer/tokenizer_config.h"
#include "kiln/data/tokenizer/json_util.h"
#include "kiln/data/tokenizer/normalized.h"
#include "kiln/data/tokenizer/pieces.h"
#include "kiln/data/tokenizer/pipeline.h"
#include "kiln/data/tokenizer/added_vocabulary.h"
#include "kiln/data/tokenizer/tokenizer.h"
#include "kiln/data/tokenizer/pipeline_tokenizer.h"
#include "kiln/data/dataset.h"
#include "kiln/data/sampler.h"
#include "kiln/data/token_budget_sampler.h"
#include "kiln/data/loader_run.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/device_staging.h"
#include "kiln/data/corpus.h"
#include "kiln/data/pretraining.h"
#include "kiln/data/causal_lm.h"
#include "kiln/data/finetune_data.h"
#include "kiln/data/token_data.h"
#include "kiln/data/synthetic_corpus.h"

// data-parallel training
#include "kiln/dist/process_group.h"
#include "kiln/dist/ddp.h"

// training: Trainer, TrainTask, checkpoints, metrics
#include "kiln/train/trainer.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/metrics.h"
#include "kiln/train/task_metrics.h"
#include "kiln/train/metric_log.h"
#include "kiln/train/progress.h"
#include "kiln/train/preemption.h"
#include "kiln/train/task_util.h"
#include "kiln/train/mlm_task.h"
#include "kiln/train/text_pretraining_task.h"
#include "kiln/train/causal_lm_task.h"
#include "kiln/train/classification_task.h"
#include "kiln/train/token_classification_task.h"
#include "kiln/train/tasks.h"
