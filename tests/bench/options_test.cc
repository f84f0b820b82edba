// File: tests/bench/options_test.cc
// bench/train_step's flags: defaults, lists, and errors that name the flag.
#include "bench/options.h"

#include <doctest/doctest.h>

#include "tests/testing.h"

namespace loom::bench {
namespace {

TEST_CASE("defaults: the reference models, batch 128 and 512, every precision, three modes") {
  const BenchOptions o = parse_options({});
  CHECK(o.models == std::vector<std::string>{"lenet5", "mnist_net", "resnet9"});
  CHECK(o.batches == std::vector<int64_t>{128, 512});
  CHECK(o.precisions == std::vector<std::string>{"tf32", "strict", "bf16"});
  CHECK(o.modes == std::vector<std::string>{"graph-traced", "graph", "eager"});
  CHECK(o.steps == 100);
  CHECK(o.repeats == 5);
  CHECK(o.warmup == 10);
  CHECK_FALSE(o.profile);
  CHECK_FALSE(o.autotune);
  CHECK(o.tta.empty());
}

TEST_CASE("lists, counts, paths and switches") {
  const BenchOptions o = parse_options({"--models",
                                        "resnet9,lenet5",
                                        "--batches",
                                        "512",
                                        "--precisions",
                                        "bf16",
                                        "--modes",
                                        "eager",
                                        "--layout",
                                        "nhwc",
                                        "--steps",
                                        "7",
                                        "--repeats",
                                        "3",
                                        "--warmup",
                                        "0",
                                        "--json",
                                        "/tmp/x.jsonl",
                                        "--profile",
                                        "--autotune",
                                        "--profile-steps",
                                        "4",
                                        "--tta",
                                        "/data",
                                        "--device",
                                        "cpu"});
  CHECK(o.models == std::vector<std::string>{"resnet9", "lenet5"});
  CHECK(o.batches == std::vector<int64_t>{512});
  CHECK(o.precisions == std::vector<std::string>{"bf16"});
  CHECK(o.modes == std::vector<std::string>{"eager"});
  CHECK(parse_options({"--modes", "graph-unfused,eager-unfused"}).modes.size() == 2);
  CHECK(o.layout == "nhwc");
  CHECK(o.steps == 7);
  CHECK(o.repeats == 3);
  CHECK(o.warmup == 0);
  CHECK(o.json == "/tmp/x.jsonl");
  CHECK(o.profile);
  CHECK(o.autotune);
  CHECK(o.profile_steps == 4);
  CHECK(o.tta == "/data");
  CHECK(o.device == Device::cpu());
  CHECK(parse_options({"--models", "none"}).models.empty());  // only --tta
  CHECK(parse_options({}).optimizer == "sgd");
  CHECK(parse_options({"--optimizer", "adam"}).optimizer == "adam");
}

TEST_CASE("the cuDNN plan-build mode, the plan timeline and the evaluation forward") {
  const BenchOptions defaults = parse_options({});
  CHECK(defaults.plan_build.empty());  // the process's mode: LOOM_CUDNN_PLAN_BUILD, else lazy
  CHECK(defaults.plan_timeline.empty());
  for (const char* mode : {"lazy", "eager", "precompiled"}) {
    CHECK(parse_options({"--plan-build", mode}).plan_build == mode);
  }
  CHECK(parse_options({"--plan-timeline", "/tmp/t.txt"}).plan_timeline == "/tmp/t.txt");
  CHECK_FALSE(defaults.eval_forward);
  CHECK(parse_options({"--eval-forward"}).eval_forward);
  CHECK_THROWS_WITH_FRAGMENT(parse_options({"--plan-build", "later"}), ValueError,
                             "--plan-build got unknown value 'later' (one of: lazy, eager, precompiled)");
}

TEST_CASE("split_list drops empty items") {
  CHECK(split_list("a,,b,") == std::vector<std::string>{"a", "b"});
  CHECK(split_list("").empty());
  CHECK(split_list("one") == std::vector<std::string>{"one"});
}

TEST_CASE("bad flags name the flag, the value and what is accepted") {
  CHECK_THROWS_WITH_FRAGMENT(parse_options({"--model", "lenet5"}), ValueError,
                             "unknown flag '--model'");
  CHECK_THROWS_WITH_FRAGMENT(parse_options({"--steps"}), ValueError, "--steps needs a value");
  CHECK_THROWS_WITH_FRAGMENT(parse_options({"--steps", "10x"}), ValueError,
                             "--steps needs an integer, got '10x'");
  CHECK_THROWS_WITH_FRAGMENT(parse_options({"--repeats", "0"}), ValueError,
                             "--repeats needs an integer >= 1, got 0");
  CHECK_THROWS_WITH_FRAGMENT(parse_options({"--batches", "128,-4"}), ValueError,
                             "--batches needs an integer >= 1, got -4");
  CHECK_THROWS_WITH_FRAGMENT(parse_options({"--models", "vgg"}), ValueError,
                             "unknown value 'vgg' (one of: lenet5, mnist_net, resnet9, resnet18, ");
  // Any model of the zoo's registry.
  CHECK(parse_options({"--models", "resnet20,unet,vit_tiny"}).models ==
        std::vector<std::string>{"resnet20", "unet", "vit_tiny"});
  CHECK_THROWS_WITH_FRAGMENT(parse_options({"--precisions", "fp16"}), ValueError,
                             "'fp16' (one of: tf32, strict, bf16)");
  CHECK_THROWS_WITH_FRAGMENT(parse_options({"--modes", "compile"}), ValueError,
                             "'compile' (one of: graph, eager, graph-traced, graph-unfused, eager-unfused)");
  CHECK_THROWS_WITH_FRAGMENT(parse_options({"--device", "tpu"}), ValueError, "--device got 'tpu'");
  CHECK_THROWS_WITH_FRAGMENT(parse_options({"--optimizer", "lamb"}), ValueError,
                             "'lamb' (one of: sgd, adam)");
  CHECK_THROWS_WITH_FRAGMENT(parse_options({"--batches", ","}), ValueError,
                             "--batches needs at least one");
}

}  // namespace
}  // namespace loom::bench
