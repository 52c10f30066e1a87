// train/metrics.h and train/progress.h. Expected metric values are worked out
// by hand from scikit-learn's formulas (see train/metrics.h); the confusion
// matrices are written out next to each case.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "train/metrics.h"
#include "train/progress.h"

namespace kiln::train {
namespace {

// Binary case: tp 4, fn 1, fp 2, tn 3.
const std::vector<int64_t> kBinaryLabels = {1, 1, 1, 1, 0, 0, 0, 0, 1, 0};
const std::vector<int64_t> kBinaryPreds = {1, 1, 0, 1, 0, 1, 0, 0, 1, 1};

// Three classes; confusion (row = label): [[2,1,0],[0,2,1],[1,0,3]].
const std::vector<int64_t> kMultiLabels = {0, 0, 0, 1, 1, 1, 2, 2, 2, 2};
const std::vector<int64_t> kMultiPreds = {0, 1, 0, 1, 1, 2, 2, 2, 0, 2};

TEST(TrainMetrics, MlmAccuracyAndPerplexity) {
  MlmMetrics m;
  const std::vector<int64_t> preds = {5, 7, 9, 2, 3, 4};
  const std::vector<int64_t> labels = {5, -100, 9, 1, -100, 4};
  m.add_predictions(preds, labels);
  EXPECT_EQ(m.predicted(), 4);
  EXPECT_EQ(m.correct(), 3);
  EXPECT_DOUBLE_EQ(m.accuracy(), 0.75);
  m.add_counts(1, 4);  // 4 of 8
  EXPECT_DOUBLE_EQ(m.accuracy(), 0.5);

  m.add_loss(2.0, 4);
  m.add_loss(3.0, 6);
  m.add_loss(100.0, 0);                  // no tokens: ignored
  EXPECT_DOUBLE_EQ(m.mean_loss(), 2.6);  // (2*4 + 3*6) / 10
  EXPECT_DOUBLE_EQ(m.perplexity(), std::exp(2.6));

  const auto s = m.summary("eval_");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_DOUBLE_EQ(s.at("eval_mlm_accuracy"), 0.5);
  EXPECT_DOUBLE_EQ(s.at("eval_loss"), 2.6);
  EXPECT_DOUBLE_EQ(s.at("eval_perplexity"), std::exp(2.6));

  m.reset();
  EXPECT_TRUE(m.summary().empty());
  m.add_loss(1000.0, 1);
  EXPECT_TRUE(std::isinf(m.perplexity()));  // overflow is inf, as in HF's run_mlm
}

TEST(TrainMetrics, MlmErrors) {
  MlmMetrics m;
  EXPECT_THROW(m.accuracy(), Error);
  EXPECT_THROW(m.perplexity(), Error);
  const std::vector<int64_t> two = {1, 2}, three = {1, 2, 3};
  try {
    m.add_predictions(two, three);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 predictions but 3 labels"), std::string::npos) << e.what();
  }
  EXPECT_THROW(m.add_counts(5, 4), Error);
  EXPECT_THROW(m.add_counts(-1, 4), Error);
  EXPECT_THROW(m.add_loss(1.0, -1), Error);
}

TEST(TrainMetrics, BinaryClassification) {
  ClassificationMetrics m(2);
  m.add(kBinaryPreds, kBinaryLabels);
  EXPECT_EQ(m.count(), 10);
  EXPECT_EQ(m.confusion(1, 1), 4);
  EXPECT_EQ(m.confusion(1, 0), 1);
  EXPECT_EQ(m.confusion(0, 1), 2);
  EXPECT_EQ(m.confusion(0, 0), 3);
  EXPECT_DOUBLE_EQ(m.accuracy(), 0.7);
  EXPECT_DOUBLE_EQ(m.f1(), 8.0 / 11.0);        // 2*4 / (2*4 + 2 + 1)
  EXPECT_DOUBLE_EQ(m.class_f1(0), 6.0 / 9.0);  // 2*3 / (2*3 + 1 + 2)
  // (tp tn - fp fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)) = 10 / sqrt(6*5*5*4)
  EXPECT_NEAR(m.matthews_corrcoef(), 10.0 / std::sqrt(600.0), 1e-15);
  const auto s = m.summary("eval_");
  EXPECT_DOUBLE_EQ(s.at("eval_accuracy"), 0.7);
  EXPECT_DOUBLE_EQ(s.at("eval_f1"), 8.0 / 11.0);
  EXPECT_NEAR(s.at("eval_mcc"), 0.408248290463863, 1e-14);

  // Batching does not matter.
  ClassificationMetrics one_by_one(2);
  for (size_t i = 0; i < kBinaryLabels.size(); ++i) one_by_one.add(kBinaryPreds[i], kBinaryLabels[i]);
  EXPECT_EQ(one_by_one.matthews_corrcoef(), m.matthews_corrcoef());
}

TEST(TrainMetrics, MultiClassClassification) {
  for (const int64_t num_classes : {3, 4}) {  // with 4, class 3 never occurs
    ClassificationMetrics m(num_classes);
    m.add(kMultiPreds, kMultiLabels);
    EXPECT_DOUBLE_EQ(m.accuracy(), 0.7);
    // Per-class F1: 4/6, 4/6, 6/8; an absent class is not averaged (sklearn).
    EXPECT_DOUBLE_EQ(m.macro_f1(), 25.0 / 36.0);
    EXPECT_DOUBLE_EQ(m.f1(), 25.0 / 36.0);
    // t = p = (3, 3, 4), c = 7, s = 10: (70 - 34) / sqrt(66 * 66)
    EXPECT_NEAR(m.matthews_corrcoef(), 6.0 / 11.0, 1e-15);
  }
  // Row and column sums differing: confusion [[1,2,0],[0,1,0],[0,1,1]],
  // t = (3,1,2), p = (1,4,1), c = 3, s = 6:
  // (18 - (3 + 4 + 2)) / sqrt((36 - 18) * (36 - 14)) = 9 / sqrt(396)
  ClassificationMetrics m(3);
  const std::vector<int64_t> labels = {0, 0, 0, 1, 2, 2}, preds = {0, 1, 1, 1, 1, 2};
  m.add(preds, labels);
  EXPECT_NEAR(m.matthews_corrcoef(), 9.0 / std::sqrt(396.0), 1e-15);
  // F1 = 2tp / (2tp + fp + fn): class 0 2/(2+0+2), class 1 2/(2+3+0), class 2 2/(2+0+1).
  EXPECT_NEAR(m.macro_f1(), (0.5 + 0.4 + 2.0 / 3) / 3, 1e-15);
}

TEST(TrainMetrics, UndefinedCasesAreZero) {
  ClassificationMetrics constant_prediction(2);
  const std::vector<int64_t> labels = {0, 1, 1, 0}, ones = {1, 1, 1, 1}, zeros = {0, 0, 0, 0};
  constant_prediction.add(ones, labels);
  EXPECT_EQ(constant_prediction.matthews_corrcoef(), 0.0);
  ClassificationMetrics one_class(2);
  one_class.add(zeros, zeros);
  EXPECT_EQ(one_class.matthews_corrcoef(), 0.0);
  EXPECT_EQ(one_class.f1(), 0.0);  // no positives anywhere: zero_division -> 0
  EXPECT_EQ(one_class.accuracy(), 1.0);
  EXPECT_EQ(one_class.macro_f1(), 1.0);  // only class 0 occurs, predicted perfectly
}

TEST(TrainMetrics, ClassificationErrors) {
  EXPECT_THROW(ClassificationMetrics(1), Error);
  ClassificationMetrics m(3);
  EXPECT_THROW(m.accuracy(), Error);
  EXPECT_THROW(m.matthews_corrcoef(), Error);
  try {
    m.add(3, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prediction 3 is outside [0, 3)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(m.add(0, -1), Error);
  const std::vector<int64_t> good_then_bad = {0, 7}, labels = {0, 0};
  EXPECT_THROW(m.add(good_then_bad, labels), Error);
  EXPECT_EQ(m.count(), 0);  // a bad batch adds nothing
}

// ---- Progress ---------------------------------------------------------------

// A clock that returns the queued times in order (then repeats the last).
struct FakeClock {
  std::vector<double> times;
  size_t next = 0;
  Progress::Clock clock() {
    return [this] { return times[std::min(next++, times.size() - 1)]; };
  }
};

TEST(TrainProgress, FormatDuration) {
  EXPECT_EQ(format_duration(0), "0:00:00");
  EXPECT_EQ(format_duration(59.99), "0:00:59");
  EXPECT_EQ(format_duration(3661.5), "1:01:01");
  EXPECT_EQ(format_duration(360000), "100:00:00");
  EXPECT_EQ(format_duration(-1), "-:--:--");
  EXPECT_EQ(format_duration(std::nan("")), "-:--:--");
}

TEST(TrainProgress, PlainLinesWhenNotATerminal) {
  FakeClock fake{{100, 110, 120, 3725}};
  std::ostringstream out;
  {
    Progress progress(100, out, /*is_terminal=*/false, 0, fake.clock());
    progress.update(10, {{"loss", 2.5}, {"lr", 1e-4}, {"tokens_per_s", 1234.4}});
    progress.update(20, {{"loss", 2.25}, {"grad_norm", 0.5}});
    progress.finish();
    progress.finish();  // once only
  }
  EXPECT_EQ(out.str(),
            "step 10/100 loss 2.5000 lr 1.000e-04 tok/s 1234 elapsed 0:00:10 ETA 0:01:30\n"
            "step 20/100 loss 2.2500 grad_norm 0.5 elapsed 0:00:20 ETA 0:01:20\n"
            "done 20/100 in 1:00:25\n");
}

TEST(TrainProgress, ResumedRunCountsOnlyItsOwnSteps) {
  FakeClock fake{{0, 0, 30}};
  std::ostringstream out;
  Progress progress(1000, out, false, /*start_step=*/900, fake.clock());
  progress.update(900, {});  // nothing done yet: no ETA
  progress.update(930, {});  // 30 steps in 30 s, 70 to go
  EXPECT_EQ(out.str(),
            "step 900/1000 elapsed 0:00:00 ETA -:--:--\n"
            "step 930/1000 elapsed 0:00:30 ETA 0:01:10\n");
}

TEST(TrainProgress, TerminalLineRedrawnInPlace) {
  // construction, 3 updates (the second within 0.1 s of the first: skipped), finish
  FakeClock fake{{0, 1, 1.05, 2, 2}};
  std::ostringstream out;
  Progress progress(4, out, /*is_terminal=*/true, 0, fake.clock());
  progress.update(1, {{"loss", 12.0}, {"lr", 0.5}});
  progress.update(2, {{"loss", 11.0}});
  progress.update(4, {{"loss", 1.5}});
  progress.finish();
  const std::string first = "[#####...............] 1/4 loss 12.0000 lr 5.000e-01 ETA 0:00:03";
  const std::string last = "[####################] 4/4 loss 1.5000 ETA 0:00:00";
  const std::string padding(first.size() - last.size(), ' ');
  EXPECT_EQ(out.str(), "\r" + first + "\r" + last + padding + "\ndone 4/4 in 0:00:02\n");
}

TEST(TrainProgress, Errors) {
  std::ostringstream out;
  EXPECT_THROW(Progress(0, out, false), Error);
  EXPECT_THROW(Progress(10, out, false, 11), Error);
  Progress progress(10, out, false);
  try {
    progress.update(11, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step 11 is outside [0, 10]"), std::string::npos) << e.what();
  }
}

TEST(TrainProgress, TerminalDetectionMatchesIsatty) { EXPECT_EQ(stdout_is_terminal(), isatty(STDOUT_FILENO) == 1); }

}  // namespace
}  // namespace kiln::train
