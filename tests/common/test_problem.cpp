#include <gtest/gtest.h>

#include <limits>

#include "kernels/common/error.h"
#include "kernels/common/problem.h"

namespace detfuse {
namespace {

FlceProblem ok_flce() {
  FlceProblem p;
  p.N = 8;
  p.D = 16;
  p.V = 31;
  return p;
}

// The message of the Error thrown by validate(), or "" if none.
template <class P>
std::string validation_error(const P& p) {
  try {
    p.validate();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::invalid_argument);
    return e.what();
  }
  return "";
}

TEST(FlceProblem, ValidProblemPasses) { EXPECT_EQ(validation_error(ok_flce()), ""); }

TEST(FlceProblem, ErrorsNameTheField) {
  struct Case {
    const char* field;
    void (*mutate)(FlceProblem&);
  };
  const Case cases[] = {
      {"N", [](FlceProblem& p) { p.N = 0; }},
      {"D", [](FlceProblem& p) { p.D = -3; }},
      {"V", [](FlceProblem& p) { p.V = 0; }},
      {"ignore_index", [](FlceProblem& p) { p.ignore_index = 5; }},
      {"label_smoothing", [](FlceProblem& p) { p.label_smoothing = 1.0; }},
      {"label_smoothing", [](FlceProblem& p) { p.label_smoothing = -0.1; }},
      {"lse_square_scale", [](FlceProblem& p) { p.lse_square_scale = -1; }},
      {"softcap", [](FlceProblem& p) { p.softcap = -2; }},
      {"grad_output", [](FlceProblem& p) { p.grad_output = std::numeric_limits<double>::infinity(); }},
      {"grad_dtype", [](FlceProblem& p) { p.dtype = DType::f32; p.grad_dtype = DType::bf16; }},
  };
  for (const auto& c : cases) {
    FlceProblem p = ok_flce();
    c.mutate(p);
    std::string msg = validation_error(p);
    EXPECT_EQ(msg.rfind(c.field, 0), 0u) << "field " << c.field << " message '" << msg << "'";
  }
}

TEST(FlceProblem, IgnoreIndexAtOrBeyondVIsAllowed) {
  FlceProblem p = ok_flce();
  p.ignore_index = p.V;
  EXPECT_EQ(validation_error(p), "");
}

TEST(FlceProblem, KeySpellsEveryFieldAndDistinguishesProblems) {
  FlceProblem p = ok_flce();
  EXPECT_EQ(p.key(), "flce:N=8,D=16,V=31,dtype=bf16,grad=fp32,ii=-100,red=mean,ls=0,z=0,cap=0,go=1");
  FlceProblem q = p;
  q.accumulate_dW = true;  // keyed only when set: keys stored before the field existed stay valid
  EXPECT_EQ(q.key(), p.key() + ",acc=1");
  q = p;
  q.label_smoothing = 0.1;
  EXPECT_NE(p.key(), q.key());
  EXPECT_NE(q.key().find("ls=0.1,"), std::string::npos) << q.key();
  q = p;
  q.reduction = Reduction::none;
  EXPECT_NE(p.key(), q.key());
  EXPECT_EQ(p.shape(), "8,16,31");
}

TEST(FlceProblem, FlopConventions) {
  FlceProblem p = ok_flce();
  EXPECT_DOUBLE_EQ(p.flops_forward_backward(), 6.0 * 8 * 16 * 31);
  EXPECT_DOUBLE_EQ(p.flops_forward(), 2.0 * 8 * 16 * 31);
}

TEST(Dtype, ParseAndPrint) {
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp32"), DType::f32);
  EXPECT_STREQ(to_string(DType::bf16), "bf16");
  EXPECT_THROW(parse_dtype("fp16"), Error);
  EXPECT_EQ(parse_reduction("none"), Reduction::none);
  EXPECT_THROW(parse_reduction("avg"), Error);
}

TEST(AttentionProblem, ValidationAndKey) {
  AttentionProblem a;
  a.B = 2;
  a.H = 8;
  a.Hkv = 2;
  a.Sq = 128;
  a.Sk = 256;
  a.d = 64;
  EXPECT_EQ(validation_error(a), "");
  EXPECT_DOUBLE_EQ(a.softmax_scale(), 0.125);
  EXPECT_EQ(a.key(), "attention:B=2,H=8,Hkv=2,Sq=128,Sk=256,d=64,causal=0,scale=0.125,dtype=bf16");
  EXPECT_DOUBLE_EQ(a.flops_forward(), 4.0 * 2 * 8 * 128 * 256 * 64);
  a.causal = true;
  EXPECT_DOUBLE_EQ(a.flops_forward(), 2.0 * 2 * 8 * 128 * 256 * 64);
  a.Hkv = 3;
  EXPECT_EQ(validation_error(a).rfind("Hkv", 0), 0u);
}

TEST(AttentionProblem, SoftcapAndWindowInKeyOnlyWhenSet) {
  AttentionProblem a;
  a.B = 1;
  a.H = 2;
  a.Hkv = 1;
  a.Sq = 64;
  a.Sk = 64;
  a.d = 64;
  a.causal = true;
  const std::string plain = a.key();
  EXPECT_EQ(plain.find("cap="), std::string::npos);
  EXPECT_EQ(plain.find("win="), std::string::npos);
  a.softcap = 50;
  a.window = 16;
  EXPECT_EQ(validation_error(a), "");
  EXPECT_EQ(a.key(), plain + ",cap=5e+01,win=16");  // num(): the shortest text that reads back
  a.softcap = -1;
  EXPECT_EQ(validation_error(a).rfind("softcap", 0), 0u);
  a.softcap = std::numeric_limits<double>::infinity();
  EXPECT_EQ(validation_error(a).rfind("softcap", 0), 0u);
  a.softcap = 0;
  a.window = -1;
  EXPECT_EQ(validation_error(a).rfind("window", 0), 0u);
  a.window = kMaxDim + 1;
  EXPECT_EQ(validation_error(a).rfind("window", 0), 0u);
}

}  // namespace
}  // namespace detfuse
