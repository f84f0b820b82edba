// File: tests/training/train_cli_output_test.cc
// What the trainers write, run as a user runs them: progress in a log file,
// paths under `bazel run`, metrics rows (run id, flags, elapsed time) that
// appends keep parseable, --detect-anomaly's message, --plot (its check
// before training, and a real PNG where matplotlib is installed) and
// --export-onnx (a file the ONNX checker passes, Debian's python3-onnx).
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "tests/examples/program_run.h"

namespace {

namespace fs = std::filesystem;
using Run = loom::testing::ProgramRun;
using loom::testing::has;

Run mnist(const std::string& args, const std::string& environment = "") {
  return loom::testing::run_program("examples/mnist/train", args, environment);
}

constexpr const char* kSmall = "--device=cpu --synthetic=64 --batch-size=32 --epochs=1 ";

// A fresh folder for one test case, removed at the end.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() / (name + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& file) const { return (path_ / file).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Fields of a CSV line (RFC 4180 quoting).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (ch == '"' && quoted && i + 1 < line.size() && line[i + 1] == '"') {
      fields.back() += '"';
      ++i;
    } else if (ch == '"') {
      quoted = !quoted;
    } else if (ch == ',' && !quoted) {
      fields.emplace_back();
    } else {
      fields.back() += ch;
    }
  }
  return fields;
}

bool matplotlib_installed() {
  return std::system("/usr/bin/python3 -c 'import matplotlib' > /dev/null 2>&1") == 0;
}

}  // namespace

TEST_CASE("progress into a log file: no carriage returns, one line per tenth of the epoch") {
  Run r = mnist("--device=cpu --synthetic=320 --batch-size=32 --epochs=1");
  REQUIRE(r.code == 0);
  CHECK(r.output.find('\r') == std::string::npos);
  CHECK(has(r, "epoch 1/1  10% 1/10 loss "));
  CHECK(has(r, "epoch 1/1 100% 10/10 loss "));
  int progress_lines = 0;
  for (size_t at = r.output.find("epoch 1/1 "); at != std::string::npos; at = r.output.find("epoch 1/1 ", at + 1)) {
    ++progress_lines;
  }
  CHECK(progress_lines == 10);
}

TEST_CASE("under bazel run, relative --metrics and --save land in the user's directory") {
  TempDir user("loom_cli_user_");
  Run r = mnist(std::string(kSmall) + "--metrics m.csv --save ck.safetensors",
                "BUILD_WORKING_DIRECTORY=" + user.path().string());
  REQUIRE(r.code == 0);
  CHECK(fs::exists(user / "m.csv"));
  CHECK(fs::exists(user / "ck.safetensors"));
  CHECK_FALSE(fs::exists("m.csv"));  // not in the runfiles tree the program starts in
}

TEST_CASE("metrics rows carry the run id, the flags and the elapsed time; runs append under one header") {
  TempDir dir("loom_cli_metrics_");
  const std::string csv = dir / "m.csv";
  REQUIRE(mnist(std::string(kSmall) + "--metrics " + csv).code == 0);
  REQUIRE(mnist(std::string(kSmall) + "--seed 7 --metrics=" + csv).code == 0);
  std::vector<std::string> lines = lines_of(csv);
  REQUIRE(lines.size() == 3);
  const std::vector<std::string> columns = csv_fields(lines[0]);
  CHECK(columns == std::vector<std::string>{"run_id", "epoch", "train_loss", "train_accuracy",
                                            "test_loss", "test_accuracy", "images_per_second",
                                            "seconds", "elapsed_seconds", "flags"});
  std::set<std::string> run_ids;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> row = csv_fields(lines[i]);
    REQUIRE(row.size() == columns.size());
    run_ids.insert(row[0]);
    CHECK(row[1] == "1");
    CHECK(std::stod(row[8]) >= std::stod(row[7]));  // elapsed includes the epoch
    CHECK(row[9].find("--synthetic 64 --model mnist_net --epochs 1 --batch-size 32") == 0);
  }
  CHECK(run_ids.size() == 2);
  CHECK(csv_fields(lines[2])[9].find("--seed 7") != std::string::npos);

  const std::string jsonl = dir / "m.jsonl";
  REQUIRE(mnist(std::string(kSmall) + "--metrics " + jsonl).code == 0);
  std::vector<std::string> rows = lines_of(jsonl);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].starts_with("{\"run_id\": \""));
  CHECK(has({0, rows[0]}, "\"elapsed_seconds\": "));
  CHECK(has({0, rows[0]}, "\"flags\": \"--synthetic 64 --model mnist_net"));
}

TEST_CASE("a metrics file with other columns is refused before training, not appended to") {
  TempDir dir("loom_cli_old_metrics_");
  const std::string csv = dir / "old.csv";
  std::ofstream(csv) << "epoch,train_loss,train_accuracy,test_accuracy,images_per_second,seconds\n";
  Run r = mnist(std::string(kSmall) + "--metrics " + csv);
  CHECK(r.code == 1);
  CHECK(has(r, "the file has other columns"));
  CHECK(has(r, "pass a new file name"));
  CHECK(lines_of(csv).size() == 1);
}

TEST_CASE("a metrics file that cannot be opened says why; a FIFO is refused, not read") {
  TempDir dir("loom_cli_metrics_open_");
  Run missing = mnist(std::string(kSmall) + "--metrics " + (dir / "no/such/folder/m.csv"));
  CHECK(missing.code == 1);
  CHECK(has(missing, "m.csv: cannot open the file for appending: No such file or directory"));
  const std::string fifo = dir / "pipe.csv";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);  // reading its header would block
  Run pipe = mnist(std::string(kSmall) + "--metrics " + fifo);
  CHECK(pipe.code == 1);
  CHECK(has(pipe, "pipe.csv: is a FIFO, not a regular file"));
}

TEST_CASE("--detect-anomaly names the op and module where NaN first appears") {
  // An lr this large makes the first Adam step's weights overflow.
  Run r = mnist(std::string(kSmall) + "--lr 1e38 --detect-anomaly");
  CHECK(r.code == 1);
  CHECK(has(r, "anomaly mode (eager steps, every op checked for NaN/inf)"));
  CHECK(has(r, "train: [anomaly] the forward of '"));
  CHECK(has(r, "' in 0 ("));
  CHECK(has(r, "is a leaf that requires grad, a parameter"));
  CHECK(has(r, "lower the learning rate"));
}

TEST_CASE("--plot without a Python that has matplotlib fails before training") {
  TempDir dir("loom_cli_noplot_");
  Run r = mnist(std::string(kSmall) + "--plot " + (dir / "p.png"), "LOOM_PYTHON=/nonexistent/python3");
  CHECK(r.code == 1);
  CHECK(has(r, "--plot needs Python with matplotlib (checked before training; "
               "/nonexistent/python3 could not start)"));
  CHECK(has(r, "bash tools/setup.sh python3-matplotlib"));
  CHECK_FALSE(has(r, "mnist_net on cpu"));  // nothing was loaded or trained
  CHECK_FALSE(fs::exists(dir / "p.png"));
  CHECK(mnist(std::string(kSmall) + "--plot p.pdf").code == 2);
}

TEST_CASE("--plot writes a PNG of the run's curves" * doctest::skip(!matplotlib_installed())) {
  TempDir dir("loom_cli_plot_");
  Run r = mnist("--device=cpu --synthetic=64 --batch-size=32 --epochs=2 --plot " + (dir / "p.png"));
  REQUIRE(r.code == 0);
  CHECK(has(r, "training curves written to " + (dir / "p.png")));
  std::ifstream png(dir / "p.png", std::ios::binary);
  std::string magic(8, '\0');
  png.read(magic.data(), 8);
  CHECK(magic == "\x89PNG\r\n\x1a\n");
}

TEST_CASE("--export-onnx writes the trained model, which the ONNX checker passes; an unwritable path fails first") {
  TempDir dir("loom_cli_onnx_");
  Run r = mnist(std::string(kSmall) + "--model lenet5 --export-onnx " + (dir / "m.onnx"));
  REQUIRE(r.code == 0);
  CHECK(has(r, "exported lenet5 to " + (dir / "m.onnx") + " (ONNX opset 17: "));
  CHECK(has(r, "input 'input', output 'output')"));
  const std::string check = "-c \"import onnx,sys; m=onnx.load(sys.argv[1]); "
                            "onnx.checker.check_model(m, full_check=True); "
                            "print(m.graph.input[0].type.tensor_type.shape.dim[0].dim_param)\" " + (dir / "m.onnx");
  Run checked = loom::testing::run_program("/usr/bin/python3", check);
  CHECK_MESSAGE(checked.code == 0, checked.output);
  CHECK(checked.output == "batch\n");  // a dynamic batch

  Run refused = mnist(std::string(kSmall) + "--export-onnx " + (dir / "no/such/dir/m.onnx"));
  CHECK(refused.code == 1);
  CHECK(has(refused, "--export-onnx " + (dir / "no/such/dir/m.onnx") + " cannot be written (checked before training)"));
  CHECK_FALSE(has(refused, "epoch 1/1"));
}
