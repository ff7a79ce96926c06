// emmy tune without a GPU (tune/): the param space; the search with a fake timer whose optimum is known
// (exhaustive, then sampled and refined, deterministic per seed); failure isolation with fake backends
// whose candidates crash or hang in their child process; the tuning database (keying, resume after a
// killed run, readers while one writes); the static model's ranking; GPU timing with the CPU simulation
// standing in for the GPU (and on the GPU, when there is one: tagged [runtime] for tests/gpu/run.sh); the
// device probe in a child.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <regex>
#include <set>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sqlite3.h>

#include "check/check.h"
#include "backend/nvrtc.h"
#include "compiler/elaborate.h"
#include "frontend/frontend.h"
#include "performance/performance.h"
#include "ir/tensor/evaluator.h"
#include "support/files.h"
#include "support/process.h"
#include "tune/cost_model.h"
#include "tune/database.h"
#include "tune/device.h"
#include "tune/gpu_timing.h"
#include "tune/isolation.h"
#include "tune/search.h"
#include "tune/tuner.h"

namespace {

namespace fs = std::filesystem;
using namespace emmy;
using namespace emmy::tune;

// examples/matmul.emmy with its kernel's index width given (`index_bits C 32`), so that its param space
// is its schedule's three params (the default policy would add C_index_bits), written once per process to
// the build tree (the same bytes by every process, each write a rename: concurrent tests see a whole file).
const std::string& matmulFile() {
  static const std::string path = [] {
    std::string whyNot;
    std::optional<std::string> text = readRegularFile(fs::path(EMMY_SOURCE_DIR) / "examples" / "matmul.emmy", 1 << 20, whyNot);
    REQUIRE(text);
    text->insert(text->rfind('}'), "    index_bits C 32\n");
    fs::path file = fs::path(EMMY_TEST_SCRATCH_DIR) / "tune_tests_matmul.emmy";
    writeFilesTogether({{file, *text}});
    return file.string();
  }();
  return path;
}

// A space of `params` params P0, P1, ... with candidates 0..count-1, the defaults at 0.
ParamSpace spaceOf(int params, int count) {
  std::map<std::string, DeclaredParam> declared;
  for (int p = 0; p < params; ++p) {
    DeclaredParam& param = declared["P" + std::to_string(p)];
    for (int c = 0; c < count; ++c) param.candidates.push_back(c);
  }
  return ParamSpace(declared);
}

// The fake timer: a bowl whose bottom is at `optimum` (1 ms there), deterministic in the params.
double bowl(const Candidate& candidate, const Candidate& optimum) {
  double ms = 1;
  for (const auto& [name, value] : candidate) ms += 0.1 * std::pow(static_cast<double>(value - optimum.at(name)), 2);
  return ms;
}

Measurement timed(double ms) { return {Status::Ok, ms, ""}; }

// A fake backend: times by `time`, counting its calls, optionally failing as `fail` says.
class FakeBackend : public MeasurementBackend {
public:
  explicit FakeBackend(std::function<Measurement(const Candidate&)> time) : time_(std::move(time)) {}
  std::string device() const override { return "fake device"; }
  std::string arch() const override { return "sm_90"; }
  std::string description() const override { return "fake timings"; }
  Measurement measure(const CandidateProgram& program) override {
    ++calls;
    return time_(program.params);
  }
  int calls = 0;

private:
  std::function<Measurement(const Candidate&)> time_;
};

CandidateProgram programOf(const Candidate& candidate) {
  CandidateProgram program;
  program.params = candidate;
  return program;
}

// The matmul example's params, a fake time per candidate (BM=128, BN=32, BK=8 fastest).
Measurement matmulTime(const Candidate& candidate) {
  return timed(bowl(candidate, {{"BM", 128}, {"BN", 32}, {"BK", 8}}) + candidate.at("BM") * 1e-4);
}

const std::map<std::string, int64_t> kSizes = {{"M", 256}, {"N", 256}, {"K", 256}};

TuningTarget matmulTarget(const std::map<std::string, int64_t>& sizes = kSizes, const std::string& device = "fake device") {
  std::vector<std::string> untunable;
  std::vector<TuningTarget> targets = tuningTargets(matmulFile(), "", sizes, device, "sm_90", untunable);
  REQUIRE(targets.size() == 1);
  return targets[0];
}

// A candidate of examples/matmul.emmy at `sizes`, lowered and printed as emmy tune gives it to a backend.
CandidateProgram matmulProgram(const Candidate& params, const std::map<std::string, int64_t>& sizes) {
  std::vector<std::string> untunable;
  TuningTarget target = tuningTargets(matmulFile(), "", sizes, "fake device", "sm_90", untunable)[0];
  Diagnostics diagnostics;
  auto kernels = elaborateFile(matmulFile(), "", false, params, diagnostics);
  REQUIRE(kernels);
  CandidateProgram program{"matmul", params, lower(kernels->front(), PipelineOptions{}), {}, target.sizes, {}};
  program.cuda = emitCudaFiles({program.lowered}, matmulFile());
  return program;
}

const Candidate kMatmulDefaults = {{"BM", 64}, {"BN", 64}, {"BK", 16}};

runtime::CudaDevice simulatedDevice() {
  runtime::CudaDevice device;
  device.name = "the CPU simulation";
  device.major = 9;
  return device;
}

// A kernel that "runs" by `run`, on the inputs it is given; compiling it is free.
TimedKernelCompiler fakeKernel(std::function<runtime::GpuRun(const tensor::Kernel&, const tensor::EvaluationInputs&)> run) {
  return [run](const tensor::Kernel& kernel, const cuda::GeneratedCuda&) -> TimedKernel {
    return [run, kernel](const tensor::EvaluationInputs& inputs, const runtime::Timing&) { return run(kernel, inputs); };
  };
}

}  // namespace

TEST_CASE("tune: the param space of a schedule", "[tune]") {
  TuningTarget target = matmulTarget();
  const ParamSpace& space = target.space;
  REQUIRE(space.params().size() == 3);
  CHECK(space.params()[0].name == "BK");  // by name
  CHECK(space.size() == 27);
  CHECK(candidateText(space.defaults()) == "BK=16 BM=64 BN=64");
  CHECK(candidateText(space.at(0)) == "BK=8 BM=32 BN=32");
  CHECK(candidateText(space.at(26)) == "BK=32 BM=128 BN=128");
  std::vector<std::string> neighbours;
  for (const Candidate& n : space.neighbours({{"BK", 8}, {"BM", 64}, {"BN", 128}})) neighbours.push_back(candidateText(n));
  CHECK(neighbours == std::vector<std::string>{"BK=16 BM=64 BN=128", "BK=8 BM=32 BN=128", "BK=8 BM=128 BN=128",
                                               "BK=8 BM=64 BN=64"});
  CHECK(parseCandidateText("BK=16 BM=64 BN=64") == space.defaults());
  CHECK_FALSE(parseCandidateText("BK=x"));
}

TEST_CASE("tune: a space within the budget is searched exhaustively, the defaults first", "[tune]") {
  ParamSpace space = spaceOf(3, 3);
  Candidate optimum = {{"P0", 2}, {"P1", 1}, {"P2", 2}};
  int calls = 0;
  SearchOutcome outcome = search(space, {}, 7, [&](const Candidate& c, Phase) {
    ++calls;
    return timed(bowl(c, optimum));
  });
  CHECK(outcome.exhaustive);
  CHECK(calls == 27);
  REQUIRE(outcome.trials.size() == 27);
  CHECK(outcome.trials[0].phase == Phase::Defaults);
  CHECK(outcome.trials[0].candidate == space.defaults());
  std::set<Candidate> distinct;
  for (const Trial& trial : outcome.trials) distinct.insert(trial.candidate);
  CHECK(distinct.size() == 27);
  CHECK(bestTrial(outcome.trials)->candidate == optimum);
}

TEST_CASE("tune: a large space is sampled then refined, deterministically per seed", "[tune]") {
  ParamSpace space = spaceOf(4, 8);  // 4096 points
  Candidate optimum = {{"P0", 5}, {"P1", 2}, {"P2", 7}, {"P3", 3}};
  auto run = [&](uint64_t seed) {
    return search(space, {100, std::nullopt}, seed, [&](const Candidate& c, Phase) { return timed(bowl(c, optimum)); });
  };
  SearchOutcome outcome = run(1);
  CHECK_FALSE(outcome.exhaustive);
  REQUIRE(outcome.trials.size() == 100);
  std::map<Phase, int> phases;
  for (const Trial& trial : outcome.trials) ++phases[trial.phase];
  CHECK(phases[Phase::Defaults] == 1);
  CHECK(phases[Phase::Sampling] == 49);  // the first half of the budget, the defaults included
  CHECK(phases[Phase::Refinement] == 50);
  // Refinement walks downhill from the best sample to the bottom of the bowl.
  CHECK(bestTrial(outcome.trials)->candidate == optimum);

  auto sequence = [](const SearchOutcome& o) {
    std::vector<Candidate> candidates;
    for (const Trial& trial : o.trials) candidates.push_back(trial.candidate);
    return candidates;
  };
  CHECK(sequence(run(1)) == sequence(outcome));
  CHECK(sequence(run(2)) != sequence(outcome));
}

TEST_CASE("tune: a time budget stops the search", "[tune]") {
  ParamSpace space = spaceOf(4, 8);
  SearchOutcome outcome = search(space, {std::nullopt, 0.05}, 0, [&](const Candidate& c, Phase) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return timed(1);
  });
  CHECK(outcome.trials.size() >= 2);
  CHECK(outcome.trials.size() <= 8);
}

TEST_CASE("tune: candidates that crash or hang are recorded as failed and the search goes on", "[tune]") {
  // P0 = 1 dereferences null, P0 = 2 aborts, P0 = 3 never finishes; P0 = 0 and 4 are timed. The time limit
  // leaves room for the crash report of a sanitizer build (symbolized: a few tenths of a second).
  auto fake = std::make_unique<FakeBackend>([](const Candidate& c) -> Measurement {
    switch (c.at("P0")) {
      case 1: raise(SIGSEGV); break;
      case 2: std::abort();
      case 3:
        while (true) pause();
    }
    return timed(1.0 + static_cast<double>(c.at("P0")));
  });
  IsolatedBackend isolated(std::move(fake), std::chrono::seconds(3));
  SearchOutcome outcome = search(spaceOf(1, 5), {}, 0, [&](const Candidate& c, Phase) { return isolated.measure(programOf(c)); });
  REQUIRE(outcome.trials.size() == 5);
  for (const Trial& trial : outcome.trials) {
    INFO(candidateText(trial.candidate) << ": " << trial.measurement.message);
    switch (trial.candidate.at("P0")) {
      case 0:
      case 4: CHECK(trial.measurement.status == Status::Ok); break;
      case 1:
      case 2: CHECK(trial.measurement.status == Status::Crashed); break;
      case 3:
        CHECK(trial.measurement.status == Status::TimedOut);
        CHECK(trial.measurement.message.find("no result after 3.0 s") != std::string::npos);
        break;
    }
  }
  CHECK(outcome.trials.back().candidate.at("P0") == 4);
  CHECK(candidateText(bestTrial(outcome.trials)->candidate) == "P0=0");
}

TEST_CASE("tune: the isolated child's result comes back whole", "[tune]") {
  auto fake = std::make_unique<FakeBackend>([](const Candidate&) {
    return Measurement{Status::WrongResult, 0, "C: max abs err 1.0e+00\nsecond line"};
  });
  IsolatedBackend isolated(std::move(fake), std::chrono::seconds(10));
  Measurement m = isolated.measure(programOf({{"P0", 0}}));
  CHECK(m.status == Status::WrongResult);
  CHECK(m.message == "C: max abs err 1.0e+00\nsecond line");
}

TEST_CASE("tune: records are keyed by kernel, schedule, sizes, device and architecture", "[tune]") {
  TemporaryFolder folder;
  TuningDatabase database(folder.path() / "sub" / "tuning.db", /*create=*/true);
  TuningTarget target = matmulTarget();
  Candidate params = target.space.defaults();
  database.record({target.key, target.kernel, target.file, params, timed(2.5)});
  REQUIRE(database.find(target.key, params));
  CHECK(database.find(target.key, params)->milliseconds == 2.5);

  CHECK(matmulTarget({{"M", 256}, {"N", 256}, {"K", 512}}).key.sizes == "K=512 M=256 N=256");
  for (TuningKey other : {matmulTarget({{"M", 256}, {"N", 256}, {"K", 512}}).key, matmulTarget(kSizes, "other device").key}) {
    CHECK_FALSE(database.find(other, params));
    CHECK(other.kernelHash == target.key.kernelHash);
  }
  TuningKey otherArch = target.key;
  otherArch.arch = "sm_80";
  CHECK_FALSE(database.find(otherArch, params));
  CHECK_FALSE(database.find(target.key, target.space.at(0)));

  // Neither hash depends on the param values the kernel was elaborated with.
  Diagnostics diagnostics;
  ElaborationDetails details;
  auto kernels = elaborateFile(matmulFile(), "", false, {{"BM", 128}}, diagnostics, &details);
  REQUIRE(kernels);
  CHECK(tuningKey(kernels->front(), details.params, kSizes, "fake device", "sm_90") == target.key);
  // Another schedule is another key.
  std::map<std::string, DeclaredParam> fewer = details.params;
  fewer["BM"].candidates.pop_back();
  CHECK(tuningKey(kernels->front(), fewer, kSizes, "fake device", "sm_90").scheduleHash != target.key.scheduleHash);
}

TEST_CASE("tune: a killed run loses at most the candidate in flight, and a rerun resumes", "[tune]") {
  TemporaryFolder folder;
  fs::path path = folder.path() / "tuning.db";
  TuningTarget target = matmulTarget();
  // The run is killed (SIGKILL, no chance to clean up) while it measures its fifth candidate.
  ProcessOutcome killed = runInChild(
      [&] {
        TuningDatabase database(path, true);
        FakeBackend backend([calls = 0](const Candidate& c) mutable {
          if (++calls == 5) raise(SIGKILL);
          return matmulTime(c);
        });
        tune::tune(target, {}, 0, backend, database, [](const Progress&) {});
        return 0;
      },
      folder.path() / "killed.log", std::chrono::seconds(60));
  CHECK(killed.kind == ProcessOutcome::Kind::Signaled);
  TuningDatabase database(path, true);
  CHECK(database.records().size() == 4);

  FakeBackend backend(matmulTime);
  std::vector<bool> replayedSeen;
  TuningRun resumed = tune::tune(target, {}, 0, backend, database, [&](const Progress& p) { replayedSeen.push_back(p.replayed); });
  CHECK(backend.calls == 23);
  CHECK(resumed.outcome.trials.size() == 27);
  CHECK(std::count(resumed.replayed.begin(), resumed.replayed.end(), true) == 4);
  CHECK(replayedSeen == resumed.replayed);
  CHECK(candidateText(bestTrial(resumed.outcome.trials)->candidate) == "BK=8 BM=128 BN=32");

  // The same as a run never interrupted, and a third run measures nothing.
  TuningDatabase fresh(folder.path() / "fresh.db", true);
  FakeBackend uninterrupted(matmulTime);
  TuningRun whole = tune::tune(target, {}, 0, uninterrupted, fresh, [](const Progress&) {});
  for (size_t k = 0; k < 27; ++k) CHECK(whole.outcome.trials[k].candidate == resumed.outcome.trials[k].candidate);
  FakeBackend third(matmulTime);
  tune::tune(target, {}, 0, third, database, [](const Progress&) {});
  CHECK(third.calls == 0);
  std::string table = formatTable(target, resumed, "fake timings", "tuning.db");
  INFO(table);
  CHECK(table.find("27 of 27 candidates (exhaustive): 27 ok; 23 measured now, 4 from tuning.db") != std::string::npos);
  CHECK(table.find("best: BK=8 BM=128 BN=32") != std::string::npos);
}

TEST_CASE("tune: readers see whole records while another connection writes", "[tune]") {
  TemporaryFolder folder;
  fs::path path = folder.path() / "tuning.db";
  TuningTarget target = matmulTarget();
  { TuningDatabase create(path, true); }
  std::atomic<bool> done = false;
  std::atomic<int> failures = 0;
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r)
    readers.emplace_back([&] {
      try {
        TuningDatabase reader(path, /*create=*/false);
        size_t seen = 0;
        while (!done) {
          std::vector<TuningRecord> records = reader.records();
          if (records.size() < seen) ++failures;  // records never disappear
          for (const TuningRecord& record : records)
            if (record.measurement.milliseconds != static_cast<double>(record.params.at("BM"))) ++failures;
          seen = records.size();
        }
      } catch (const std::exception&) {
        ++failures;
      }
    });
  {
    TuningDatabase writer(path, true);
    for (uint64_t k = 0; k < target.space.size(); ++k) {
      Candidate params = target.space.at(k);
      writer.record({target.key, target.kernel, target.file, params, timed(static_cast<double>(params.at("BM")))});
    }
  }
  done = true;
  for (std::thread& reader : readers) reader.join();
  CHECK(failures == 0);
  CHECK(TuningDatabase(path, false).records().size() == 27);
}

namespace {

// Runs `sql` on a database of another program at `path`, made with SQLite directly.
void runSql(const fs::path& path, const char* sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  CHECK(sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

}  // namespace

TEST_CASE("tune: a file that is not an Emmy tuning database is refused and left as it is", "[tune]") {
  TemporaryFolder folder;
  fs::path other = folder.path() / "other.db", text = folder.path() / "text.db", foreign = folder.path() / "foreign.db";
  runSql(other, "CREATE TABLE people (name TEXT); INSERT INTO people VALUES ('ann');");
  writeFilesTogether({{text, std::string(5000, 'x')}});
  // The same table as Emmy's, but another program's mark.
  runSql(foreign, "PRAGMA application_id = 7; CREATE TABLE results (kernel_hash TEXT, schedule_hash TEXT, sizes TEXT, "
                  "device TEXT, arch TEXT, params TEXT, status TEXT, milliseconds REAL, message TEXT, kernel TEXT, file TEXT);");
  for (const auto& [path, message] :
       {std::pair{other, "other.db is not an Emmy tuning database (it holds the tables people); it is left as it is"},
        std::pair{text, "text.db: file is not a database"},
        std::pair{foreign, "foreign.db is not an Emmy tuning database (it holds the tables results)"}}) {
    CAPTURE(path);
    std::string before = readWholeFile(path);
    for (bool create : {true, false}) CHECK_THROWS_WITH(TuningDatabase(path, create), Catch::Contains(message));
    CHECK(readWholeFile(path) == before);
  }
  CHECK_THROWS_WITH(TuningDatabase(folder.path() / "missing.db", false), Catch::Contains("unable to open database file"));
  CHECK_FALSE(fs::exists(folder.path() / "missing.db"));

  // A database written before the mark (the one table, user_version 1) is still Emmy's, and is marked on writing.
  fs::path old = folder.path() / "old.db";
  runSql(old, "PRAGMA user_version = 1; CREATE TABLE results (kernel_hash TEXT NOT NULL, schedule_hash TEXT NOT NULL, "
              "sizes TEXT NOT NULL, device TEXT NOT NULL, arch TEXT NOT NULL, params TEXT NOT NULL, status TEXT NOT NULL, "
              "milliseconds REAL NOT NULL, message TEXT NOT NULL, kernel TEXT NOT NULL, file TEXT NOT NULL, "
              "PRIMARY KEY (kernel_hash, schedule_hash, sizes, device, arch, params));");
  CHECK(TuningDatabase(old, false).records().empty());
  TuningTarget target = matmulTarget();
  TuningDatabase(old, true).record({target.key, target.kernel, target.file, target.space.defaults(), timed(1)});
  CHECK(TuningDatabase(old, false).records().size() == 1);
}

TEST_CASE("tune: writers that start together on a new database wait for each other", "[tune]") {
  TemporaryFolder folder;
  TuningTarget target = matmulTarget();
  // Three processes, as three `emmy tune` started at once, released together through a pipe.
  for (int round = 0; round < 20; ++round) {
    fs::path path = folder.path() / fmt::format("round{}.db", round);
    int start[2];
    REQUIRE(pipe(start) == 0);
    std::vector<pid_t> writers;
    for (int w = 0; w < 3; ++w) {
      pid_t pid = fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        close(start[1]);
        char go;
        int code = read(start[0], &go, 1) == 0 ? 0 : 1;  // returns when the parent closes its end
        try {
          TuningDatabase database(path, /*create=*/true);
          database.record({target.key, target.kernel, target.file, target.space.at(w), timed(w)});
        } catch (const std::exception& error) {
          std::fprintf(stderr, "writer %d: %s\n", w, error.what());
          code = 1;
        }
        _exit(code);
      }
      writers.push_back(pid);
    }
    close(start[0]);
    close(start[1]);
    int failures = 0;
    for (pid_t pid : writers) {
      int status = 0;
      waitpid(pid, &status, 0);
      failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CAPTURE(round);
    CHECK(failures == 0);
    CHECK(TuningDatabase(path, false).records().size() == 3);
  }
}

TEST_CASE("tune: emmy build's choice of the best recorded parameters", "[tune]") {
  TemporaryFolder folder;
  TuningDatabase database(folder.path() / "tuning.db", true);
  Diagnostics diagnostics;
  ElaborationDetails details;
  auto kernels = elaborateFile(matmulFile(), "", false, {}, diagnostics, &details);
  REQUIRE(kernels);
  const tensor::Kernel& kernel = kernels->front();
  std::string note;
  CHECK_FALSE(bestRecorded(database, kernel, details.params, "sm_90", {}, note));
  CHECK(note.empty());

  auto add = [&](const std::map<std::string, int64_t>& sizes, const std::string& device, const std::string& params, double ms) {
    TuningTarget target = matmulTarget(sizes, device);
    database.record({target.key, target.kernel, target.file, *parseCandidateText(params), timed(ms)});
  };
  add(kSizes, kStaticModelDevice, "BK=8 BM=32 BN=32", 3);
  add(kSizes, kStaticModelDevice, "BK=8 BM=64 BN=32", 2);
  std::optional<TuningRecord> best = bestRecorded(database, kernel, details.params, "sm_90", {}, note);
  REQUIRE(best);
  CHECK(candidateText(best->params) == "BK=8 BM=64 BN=32");
  CHECK_FALSE(bestRecorded(database, kernel, details.params, "sm_80", {}, note));

  // A timing beats the static model.
  add(kSizes, "NVIDIA H200", "BK=32 BM=128 BN=128", 5);
  best = bestRecorded(database, kernel, details.params, "sm_90", {}, note);
  REQUIRE(best);
  CHECK(candidateText(best->params) == "BK=32 BM=128 BN=128");

  // Two size sets: only --size decides.
  std::map<std::string, int64_t> large = {{"M", 4096}, {"N", 4096}, {"K", 4096}};
  add(large, "NVIDIA H200", "BK=16 BM=64 BN=128", 9);
  CHECK_FALSE(bestRecorded(database, kernel, details.params, "sm_90", {}, note));
  CHECK(note.find("several sizes or devices (K=256 M=256 N=256 on NVIDIA H200; K=4096 M=4096 N=4096 on NVIDIA H200)") !=
        std::string::npos);
  best = bestRecorded(database, kernel, details.params, "sm_90", large, note);
  REQUIRE(best);
  CHECK(candidateText(best->params) == "BK=16 BM=64 BN=128");
}

TEST_CASE("tune: the static model ranks matmul's candidates", "[tune]") {
  CostModelBackend model("sm_90");
  CHECK(model.description().find("estimates, not timings") != std::string::npos);
  auto estimate = [&](const std::map<std::string, int64_t>& sizes, const Candidate& params) {
    Measurement m = model.measure(matmulProgram(params, sizes));
    INFO(m.message);
    REQUIRE(m.status == Status::Ok);
    return m.milliseconds;
  };
  std::map<std::string, int64_t> small = {{"M", 1024}, {"N", 1024}, {"K", 1024}};
  std::map<std::string, int64_t> large = {{"M", 4096}, {"N", 4096}, {"K", 4096}};
  Candidate defaults = kMatmulDefaults, big = {{"BM", 128}, {"BN", 128}, {"BK", 8}};
  // 1024^2 in 128x128 tiles is 64 blocks for 132 SMs; at 4096^2 the large tiles fill the machine, and
  // lose most of what they lost against the defaults.
  double smallRatio = estimate(small, big) / estimate(small, defaults);
  double largeRatio = estimate(large, big) / estimate(large, defaults);
  CHECK(smallRatio > 1.5);
  CHECK(largeRatio < 0.75 * smallRatio);
  // Slices 32 deep: a quarter of the barriers and copies' loop overhead of 8-deep ones, for the same flops.
  Candidate deep = {{"BM", 128}, {"BN", 128}, {"BK", 32}};
  CHECK(estimate(large, deep) < estimate(large, big));
  // Bounded below by the FP32 roofline (2 x 4096^3 flops at 67 TFLOP/s).
  CHECK(estimate(large, big) > 2.0 * std::pow(4096.0, 3) / 67e12 * 1e3);
}

namespace {

// A standard-library kernel instance with `params`, lowered and printed as emmy tune gives it to a backend.
CandidateProgram stdlibProgram(const std::string& module, const std::string& kernel, const Candidate& params,
                               const std::map<std::string, int64_t>& sizes) {
  std::string file = (fs::path(Frontend::defaultStdlibDir()) / module).string();
  Diagnostics diagnostics;
  auto kernels = elaborateFile(file, kernel, true, params, diagnostics);
  INFO(diagnostics.render());
  REQUIRE(kernels);
  REQUIRE(kernels->size() == 1);
  CandidateProgram program{kernel, params, lower(kernels->front(), PipelineOptions{}), {}, sizes, {}};
  program.cuda = emitCudaFiles({program.lowered}, file);
  return program;
}

}  // namespace

TEST_CASE("tune: the static model ranks a candidate that spills last, and says so", "[tune]") {
  std::string whyNot;
  if (!nvrtcAvailable(&whyNot)) {
    WARN("NVRTC is missing, nothing to check: " << whyNot);
    return;
  }
  const std::map<std::string, int64_t> sizes = {{"M", 4096}, {"N", 4096}, {"K", 4096}};
  // The smallest block of the f32 product (two warps) and the defaults.
  Candidate smallBlock = {{"TILE_M", 64}, {"TILE_N", 64}, {"TILE_K", 16}, {"WARP_M", 32}, {"WARP_N", 64}, {"STAGES", 2}};
  Candidate defaults = {{"TILE_M", 128}, {"TILE_N", 128}, {"TILE_K", 8}, {"WARP_M", 32}, {"WARP_N", 64}, {"STAGES", 2}};
  CandidateProgram program = stdlibProgram("linalg.emmy", "matmul<f32>", smallBlock, sizes);
  CudaCompileResult compiled = compileCuda(program.cuda.source, "linalg.cu", "sm_90", /*wantCubin=*/true);
  REQUIRE(compiled.ok);
  std::vector<KernelResources> resources = resourceUsage(compiled);
  REQUIRE(resources.size() == 2);  // the kernel with 32-bit indices and its 64-bit twin
  for (const KernelResources& kernel : resources) {
    CHECK(kernel.spillStoreBytes == 0);  // the block size alone never forces a spill
    CHECK(kernel.spillLoadBytes == 0);
  }

  // The same code as ptxas would report it with spills: ranked after every candidate that does not spill.
  CudaCompileResult spilling = compiled;
  spilling.log = std::regex_replace(spilling.log, std::regex("0 bytes spill stores, 0 bytes spill loads"),
                                    "3988 bytes spill stores, 4118 bytes spill loads");
  REQUIRE(resourceUsage(spilling)[0].spillStoreBytes == 3988);
  TimeEstimate withSpills = estimateTime(program.lowered, &spilling, "sm_90", sizes);
  TimeEstimate without = estimateTime(program.lowered, &compiled, "sm_90", sizes);
  CHECK(withSpills.summary.find("SPILLS (3988 bytes stored, 4118 loaded per thread): ranked last") != std::string::npos);
  CHECK(without.summary.find("SPILLS") == std::string::npos);
  CostModelBackend model("sm_90");
  for (const Candidate& other : {defaults, smallBlock}) {
    Measurement m = model.measure(stdlibProgram("linalg.emmy", "matmul<f32>", other, sizes));
    INFO(m.message);
    REQUIRE(m.status == Status::Ok);
    CHECK(withSpills.seconds * 1e3 > m.milliseconds);
  }
}

TEST_CASE("tune: of softmax candidates that move the same bytes, the model prefers fewer issue cycles", "[tune]") {
  std::string whyNot;
  if (!nvrtcAvailable(&whyNot)) {
    WARN("NVRTC is missing, nothing to check: " << whyNot);
    return;
  }
  const std::map<std::string, int64_t> sizes = {{"N", 4096}, {"D", 4096}};
  CostModelBackend model("sm_90");
  // 16-byte vectors against 8-byte ones: the same bytes, half the memory instructions and their index arithmetic.
  CandidateProgram wide = stdlibProgram("nn.emmy", "softmax<f32>", {{"LANES", 256}, {"VEC", 4}}, sizes);
  CandidateProgram narrow = stdlibProgram("nn.emmy", "softmax<f32>", {{"LANES", 256}, {"VEC", 2}}, sizes);
  CHECK(instanceWork(wide.lowered, sizes).bytes == instanceWork(narrow.lowered, sizes).bytes);
  Measurement wideTime = model.measure(wide), narrowTime = model.measure(narrow);
  INFO(wideTime.message << "\n" << narrowTime.message);
  REQUIRE(wideTime.status == Status::Ok);
  REQUIRE(narrowTime.status == Status::Ok);
  CHECK(wideTime.milliseconds < narrowTime.milliseconds);
}

TEST_CASE("tune: GPU timing, the CPU simulation standing in for the GPU: outputs checked, the median time", "[tune]") {
  // The whole measurement but the timing: the candidate's CUDA compiled and run (by the simulation), its
  // outputs compared with the evaluator's; the "times" are given.
  TimedKernelCompiler simulated = [](const tensor::Kernel& kernel, const cuda::GeneratedCuda& source) -> TimedKernel {
    std::shared_ptr<CompiledKernel> program = simulationCompiler()(kernel, source);
    return [program](const tensor::EvaluationInputs& inputs, const runtime::Timing& timing) {
      CHECK(timing.repetitions == 3);
      runtime::GpuRun run;
      static_cast<KernelRun&>(run) = program->run(inputs);
      run.milliseconds = {3.0, 1.0, 2.0};
      return run;
    };
  };
  GpuTimingBackend backend(simulatedDevice(), simulated, runtime::Timing{1, 3, true});
  CHECK(backend.device() == "the CPU simulation");
  CHECK(backend.arch() == "sm_90");
  CHECK(backend.description() == "timed on the CPU simulation with CUDA events, median of 3 after 1 warm-ups, L2 flushed");
  std::map<std::string, int64_t> sizes = {{"M", 40}, {"N", 24}, {"K", 20}};
  Measurement m = backend.measure(matmulProgram(kMatmulDefaults, sizes));
  INFO(m.message);
  CHECK(m.status == Status::Ok);
  CHECK(m.milliseconds == 2.0);

  // As emmy tune runs it: each candidate in a child, the reference prepared in this process.
  IsolatedBackend isolated(std::make_unique<GpuTimingBackend>(simulatedDevice(), simulated, runtime::Timing{1, 3, true}),
                           std::chrono::seconds(60));
  TemporaryFolder folder;
  TuningDatabase database(folder.path() / "tuning.db", /*create=*/true);
  TuningRun run = tune::tune(matmulTarget(sizes, isolated.device()), Budget{2, std::nullopt}, 0, isolated, database, [](const Progress&) {});
  REQUIRE(run.outcome.trials.size() == 2);
  for (const Trial& trial : run.outcome.trials) {
    INFO(candidateText(trial.candidate) << ": " << trial.measurement.message);
    CHECK(trial.measurement.status == Status::Ok);
    CHECK(trial.measurement.milliseconds == 2.0);
  }
}

TEST_CASE("tune: GPU timing records a wrong output, a failed run and code that does not compile", "[tune]") {
  CandidateProgram program = matmulProgram(kMatmulDefaults, {{"M", 8}, {"N", 4}, {"K", 4}});
  auto measureWith = [&](TimedKernelCompiler compile) {
    GpuTimingBackend backend(simulatedDevice(), std::move(compile));
    return backend.measure(program);
  };
  auto correct = [](const tensor::Kernel& kernel, const tensor::EvaluationInputs& inputs) {
    runtime::GpuRun run;
    run.outputs = tensor::evaluate(kernel, inputs);
    run.milliseconds = {1.5};
    return run;
  };
  CHECK(measureWith(fakeKernel(correct)).status == Status::Ok);

  Measurement wrong = measureWith(fakeKernel([&](const tensor::Kernel& kernel, const tensor::EvaluationInputs& inputs) {
    runtime::GpuRun run = correct(kernel, inputs);
    Buffer& c = run.outputs.at("C");
    c.set(5, Value::ofFloat(DType::F32, c.get(5).asDouble() + 1));
    return run;
  }));
  CHECK(wrong.status == Status::WrongResult);
  CHECK_THAT(wrong.message, Catch::StartsWith("C: ") && Catch::Contains("FAILED"));

  Measurement fault = measureWith(fakeKernel([](const tensor::Kernel&, const tensor::EvaluationInputs&) {
    runtime::GpuRun run;
    run.failure = "matmul: kernel matmul_k0 failed: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)";
    return run;
  }));
  CHECK(fault.status == Status::Crashed);
  CHECK_THAT(fault.message, Catch::Contains("CUDA_ERROR_ILLEGAL_ADDRESS"));

  Measurement hung = measureWith(fakeKernel([](const tensor::Kernel&, const tensor::EvaluationInputs&) {
    runtime::GpuRun run;
    run.failure = "the program on the GPU did not finish in 120 s";
    run.timedOut = true;
    return run;
  }));
  CHECK(hung.status == Status::TimedOut);
  CHECK(hung.message == "the program on the GPU did not finish in 120 s");

  Measurement rejected = measureWith([](const tensor::Kernel&, const cuda::GeneratedCuda&) -> TimedKernel {
    throw InternalError("the generated CUDA for matmul does not compile with NVRTC");
  });
  CHECK(rejected.status == Status::CompileFailed);
  CHECK_THAT(rejected.message, Catch::Contains("does not compile with NVRTC"));
}

TEST_CASE("tune: an isolated backend prepares in the parent and measures in the child", "[tune]") {
  // What prepare computes (GPU timing: the reference outputs) must outlive the children, or every
  // candidate would compute it again.
  class Counting : public MeasurementBackend {
  public:
    Counting(int& prepared, int& measured) : prepared_(prepared), measured_(measured) {}
    std::string device() const override { return "fake device"; }
    std::string arch() const override { return "sm_90"; }
    std::string description() const override { return "counted"; }
    void prepare(const CandidateProgram&) override { ++prepared_; }
    Measurement measure(const CandidateProgram&) override { return timed(++measured_); }

  private:
    int &prepared_, &measured_;
  };
  int prepared = 0, measured = 0;
  IsolatedBackend isolated(std::make_unique<Counting>(prepared, measured), std::chrono::seconds(10));
  CHECK(isolated.measure(programOf({{"P0", 0}})).milliseconds == 1);
  CHECK(isolated.measure(programOf({{"P0", 1}})).milliseconds == 1);  // each child starts from the parent's count
  CHECK(prepared == 2);
  CHECK(measured == 0);
}

TEST_CASE("tune: GPU timing of matmul on the device, when there is one", "[tune][runtime]") {
  runtime::DeviceProbe probe = probeCudaDeviceInChild();
  if (!probe.device) {
    SUCCEED("no CUDA device: " << probe.reason);
    return;
  }
  GpuTimingBackend backend(*probe.device, gpuCompiler(*probe.device));
  for (const Candidate& params : {kMatmulDefaults, Candidate{{"BM", 128}, {"BN", 128}, {"BK", 32}}}) {
    Measurement m = backend.measure(matmulProgram(params, {{"M", 257}, {"N", 190}, {"K", 130}}));
    INFO(candidateText(params) << ": " << m.message);
    CHECK(m.status == Status::Ok);
    CHECK(m.milliseconds > 0);
  }
}

TEST_CASE("tune: the device probe in a child gives the runtime's answer", "[tune][runtime]") {
  runtime::DeviceProbe inChild = probeCudaDeviceInChild();
  // The runtime's own probe, here (as the [runtime] tests do), to compare with what came back.
  runtime::DeviceProbe here = runtime::probeCudaDevice();
  REQUIRE(inChild.device.has_value() == here.device.has_value());
  // A driver that answered here is initialised here; without one nothing was loaded.
  CHECK(runtime::cudaDriverInitializedHere() == here.device.has_value());
  // Once it is, the probe answers from this process (a forked child could not use the driver).
  CHECK(probeCudaDeviceInChild().device.has_value() == here.device.has_value());
  if (!here.device) {
    CHECK_FALSE(inChild.reason.empty());
    CHECK(inChild.reason == here.reason);
    return;
  }
  const runtime::CudaDevice &a = *inChild.device, &b = *here.device;
  CHECK(a.name == b.name);
  CHECK(a.arch() == b.arch());
  CHECK(a.describe() == b.describe());
  CHECK(a.peakBandwidth() == b.peakBandwidth());
  CHECK(a.peakFp32Flops() == b.peakFp32Flops());
  CHECK(a.l2Bytes == b.l2Bytes);
}
