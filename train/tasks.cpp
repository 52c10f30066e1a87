#include "train/tasks.h"

#include "nn/auto.h"
#include "train/classification_task.h"
#include "train/token_classification_task.h"

namespace kiln::train {

std::string finetuned_task_of(const std::string& model_dir) {
  const std::string task = nn::task_name_of(model_dir);
  return task == "token-classification" || task == "sequence-classification" ? task : "";
}

std::unique_ptr<TrainTask> make_finetune_task(TrainingArguments args, std::ostream& out, bool for_training) {
  if (!for_training && args.task == "sequence-classification" &&
      nn::task_name_of(args.model) == "token-classification")
    args.task = "token-classification";
  if (args.task == "token-classification") return std::make_unique<TokenClassificationTask>(args, out, for_training);
  return std::make_unique<ClassificationTask>(args, out, for_training);
}

}  // namespace kiln::train
