#include "train/tasks.h"

#include "nn/hf_checkpoint.h"
#include "train/classification_task.h"
#include "train/token_classification_task.h"

namespace kiln::train {

std::string finetuned_task_of(const std::string& model_dir) {
  for (const std::string& a : nn::load_config(model_dir).architectures) {
    if (a == "BertForTokenClassification") return "token-classification";
    if (a == "BertForSequenceClassification") return "sequence-classification";
  }
  return "";
}

std::unique_ptr<TrainTask> make_finetune_task(TrainingArguments args, std::ostream& out, bool for_training) {
  if (!for_training && args.task == "sequence-classification" &&
      finetuned_task_of(args.model) == "token-classification")
    args.task = "token-classification";
  if (args.task == "token-classification") return std::make_unique<TokenClassificationTask>(args, out, for_training);
  return std::make_unique<ClassificationTask>(args, out, for_training);
}

}  // namespace kiln::train
