// File: tests/core/cudnn/graph_norm_test.cc
// Graph::norm, the one normalization node, without a GPU: each phase binds its
// ports in its table's order (part of the plan key), every mode gets a name in
// the pattern, and a port the phase does not take, or a missing x, is refused.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cstdint>
#include <vector>

#include "core/cudnn/graph.h"
#include "core/error.h"
#include "tests/testing.h"

using namespace loom;
using namespace loom::cudnn;

namespace {

std::vector<cudnnBackendAttributeName_t> attributes(const cudnn::Node& node) {
  std::vector<cudnnBackendAttributeName_t> out;
  for (const auto& [attribute, uid] : node.ports) out.push_back(attribute);
  return out;
}

}  // namespace

TEST_CASE("Graph::norm binds each phase's ports in its table's order, whatever the mode") {
  Graph g;
  g.norm(CUDNN_GROUP_NORM, Graph::NormPhase::Train,
         {.x = 1, .scale = 2, .bias = 3, .epsilon = 4, .y = 5, .mean = 6, .inv_variance = 7});
  g.norm(CUDNN_BATCH_NORM, Graph::NormPhase::Eval,
         {.x = 1, .scale = 2, .bias = 3, .y = 5, .mean = 6, .inv_variance = 7});
  g.norm(CUDNN_INSTANCE_NORM, Graph::NormPhase::Backward,
         {.x = 1, .scale = 2, .mean = 6, .inv_variance = 7, .dy = 8, .dx = 9, .dscale = 10, .dbias = 11});
  REQUIRE(g.nodes().size() == 3);
  CHECK(g.nodes()[0].kind == NodeKind::NormForward);
  CHECK(g.nodes()[0].mode == CUDNN_GROUP_NORM);
  CHECK(g.nodes()[0].phase == CUDNN_NORM_FWD_TRAINING);
  CHECK(attributes(g.nodes()[0]) ==
        std::vector{CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC,
                    CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC,
                    CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC,
                    CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC});
  // The inference phase reads the statistics: they come before the affine.
  CHECK(g.nodes()[1].phase == CUDNN_NORM_FWD_INFERENCE);
  CHECK(attributes(g.nodes()[1]) ==
        std::vector{CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC,
                    CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC,
                    CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, CUDNN_ATTR_OPERATION_NORM_FWD_YDESC});
  CHECK(g.nodes()[2].kind == NodeKind::NormBackward);
  CHECK(g.nodes()[2].ports.front() == std::pair{CUDNN_ATTR_OPERATION_NORM_BWD_XDESC, int64_t{1}});
  CHECK(g.nodes()[2].ports[1] == std::pair{CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC, int64_t{8}});
  const std::string pattern = g.pattern();
  CHECK_MESSAGE(pattern.find("gn_fwd_train+bn_fwd_infer+in_bwd") != std::string::npos, pattern);
}

TEST_CASE("Graph::norm refuses a port its phase does not take, and a missing x") {
  Graph g;
  CHECK_THROWS_WITH_FRAGMENT(g.norm(CUDNN_LAYER_NORM, Graph::NormPhase::Backward, {.x = 1, .y = 2}), ValueError,
                             "[cudnn graph] norm node (ln_bwd, phase 2) got 2 ports but its phase takes 1");
  CHECK_THROWS_WITH_FRAGMENT(g.norm(CUDNN_BATCH_NORM, Graph::NormPhase::Eval, {.scale = 1, .y = 2}), ValueError,
                             "(x missing)");
  CHECK(g.nodes().empty());
}
#endif
