// The fine-tuning tasks kiln ships and how a run picks one. A task is a
// TrainTask (train/trainer.h): a model head, a data collator and a metric;
// adding one adds a class and a line here, never a branch in train().
//
//   --task sequence-classification  ClassificationTask (train/classification_task.h):
//                                   single-label, regression (a float label
//                                   column) or --multi-label
//   --task regression               ClassificationTask with one output (Note [Problem types])
//   --task token-classification     TokenClassificationTask (train/token_classification_task.h)
// Pretraining is MlmTask (train/mlm_task.h).
#pragma once
#include <memory>
#include <ostream>
#include <string>

#include "kiln/train/trainer.h"

namespace kiln::train {

// The task args.task names (for_training = false: kiln evaluate / predict,
// where a fine-tuned model's architecture decides (nn::task_name_of): a
// *ForTokenClassification config makes a token-classification task).
std::unique_ptr<TrainTask> make_finetune_task(TrainingArguments args, std::ostream& out, bool for_training = true);

// "token-classification" or "sequence-classification" for a model directory
// whose config.json names its family's *ForTokenClassification or
// *ForSequenceClassification, else "" (a base or masked-LM model). Kept for
// 0.2 programs: the answer is the Auto layer's, nn::task_name_of (nn/auto.h).
std::string finetuned_task_of(const std::string& model_dir);

}  // namespace kiln::train
