#include "tune/tuner.h"

#include <algorithm>
#include <sstream>
#include <variant>

#include <fmt/format.h>

#include "compiler/elaborate.h"
#include "compiler/pipeline.h"
#include "ir/tensor/printer.h"
#include "support/diagnostics.h"
#include "support/text.h"
#include "tune/cost_model.h"

namespace emmy::tune {

namespace {

std::string collapseSpaces(std::string_view text) {
  std::string out;
  std::istringstream words{std::string(text)};
  for (std::string word; words >> word;) out += (out.empty() ? "" : " ") + word;
  return out;
}

std::string sizesText(const std::map<std::string, int64_t>& sizes) {
  std::string text;
  for (const auto& [name, value] : sizes) text += fmt::format("{}{}={}", text.empty() ? "" : " ", name, value);
  return text;
}

// The first line of the first error, without the source line and caret under it.
std::string firstError(const Diagnostics& diagnostics) {
  std::string rendered = diagnostics.render();
  return rendered.substr(0, rendered.find('\n'));
}

// The kernel's own sizes out of `sizes`, which may hold those of other kernels of the file.
std::map<std::string, int64_t> sizesOf(const tensor::Kernel& kernel, const std::map<std::string, int64_t>& sizes) {
  std::map<std::string, int64_t> own;
  for (const std::string& size : kernel.sizes)
    if (auto value = sizes.find(size); value != sizes.end()) own[size] = value->second;
  return own;
}

// The candidate checked, lowered and printed as CUDA; or why it is illegal.
std::variant<CandidateProgram, Measurement> prepare(const TuningTarget& target, const Candidate& candidate) {
  Diagnostics diagnostics;
  std::optional<std::vector<tensor::Kernel>> kernels =
      elaborateFile(target.file, target.kernel, /*requireTypes=*/true, candidate, diagnostics);
  if (!kernels) return Measurement{Status::Illegal, 0, firstError(diagnostics)};
  EMMY_INTERNAL_ASSERT(kernels->size() == 1, "--kernel {} selects {} instances", target.kernel, kernels->size());
  try {
    CandidateProgram program{target.kernel, candidate, lower(kernels->front(), PipelineOptions{}), {}, target.sizes,
                             target.scalars};
    program.cuda = emitCudaFiles({program.lowered}, target.file);
    return program;
  } catch (const CompilationFailed& failed) {
    return Measurement{Status::Illegal, 0, firstError(failed.diagnostics)};
  } catch (const InternalError& e) {
    // A bug in Emmy, but in one candidate: recorded, and the search goes on.
    return Measurement{Status::CompileFailed, 0, e.what()};
  }
}

std::string formatMilliseconds(double milliseconds) {
  if (milliseconds >= 1) return fmt::format("{:.3f} ms", milliseconds);
  return fmt::format("{:.1f} us", milliseconds * 1e3);
}

// Rows of cells as a table with left-aligned columns, two spaces apart, indented by two.
std::string alignColumns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) {
      if (widths.size() <= c) widths.push_back(0);
      widths[c] = std::max(widths[c], row[c].size());
    }
  std::string text;
  for (const auto& row : rows) {
    std::string line = " ";
    for (size_t c = 0; c < row.size(); ++c) line += " " + row[c] + std::string(c + 1 < row.size() ? widths[c] - row[c].size() + 1 : 0, ' ');
    while (!line.empty() && line.back() == ' ') line.pop_back();
    text += line + "\n";
  }
  return text;
}

}  // namespace

TuningKey tuningKey(const tensor::Kernel& kernel, const std::map<std::string, DeclaredParam>& params,
                    const std::map<std::string, int64_t>& sizes, const std::string& device, const std::string& arch) {
  std::string schedule;
  for (const auto& [name, param] : params) {
    std::vector<std::string> candidates;
    for (int64_t value : param.candidates) candidates.push_back(std::to_string(value));
    schedule += fmt::format("param {} in [{}] = {}\n", name, join(candidates, ", "), param.defaultValue);
  }
  for (const tensor::Directive& directive : kernel.schedule) {
    const SourceLoc& loc = directive.loc;
    std::string_view line = loc.valid() ? loc.file->line(loc.line) : std::string_view();
    EMMY_INTERNAL_ASSERT(loc.column >= 1 && static_cast<size_t>(loc.column - 1) <= line.size(),
                         "a directive without its source text");
    schedule += collapseSpaces(line.substr(loc.column - 1, loc.length)) + "\n";
  }
  return {stableHash(tensor::printKernel(kernel)), stableHash(schedule), sizesText(sizesOf(kernel, sizes)), device, arch};
}

std::vector<TuningTarget> tuningTargets(const std::string& file, const std::string& selector,
                                        const std::map<std::string, int64_t>& sizes, const std::string& device,
                                        const std::string& arch, std::vector<std::string>& untunable,
                                        const std::map<std::string, std::string>& scalars) {
  Diagnostics diagnostics;
  std::optional<std::vector<tensor::Kernel>> kernels = elaborateFile(file, selector, /*requireTypes=*/false, {}, diagnostics);
  if (!kernels) throw CompilationFailed{diagnostics};
  checkSizeNamesExist(sizes, *kernels);
  checkScalarNamesExist(scalars, *kernels);
  std::vector<TuningTarget> targets;
  for (const tensor::Kernel& kernel : *kernels) {
    // Alone, so that the params are this instance's schedule's only.
    std::string label = kernel.selector();
    ElaborationDetails details;
    std::optional<std::vector<tensor::Kernel>> instance =
        elaborateFile(file, label, /*requireTypes=*/true, {}, diagnostics, &details);
    EMMY_INTERNAL_ASSERT(instance && instance->size() == 1, "{} does not elaborate alone", label);
    const std::map<std::string, DeclaredParam>& params = details.params;
    if (params.empty()) {
      untunable.push_back(label);
      continue;
    }
    std::vector<std::string> missing;
    for (const std::string& size : kernel.sizes)
      if (!sizes.count(size)) missing.push_back(size);
    if (!missing.empty())
      throw UsageError(fmt::format("tuning {} needs every size: add --size {}", label,
                                   join([&] {
                                     std::vector<std::string> options;
                                     for (const std::string& size : missing) options.push_back(size + "=...");
                                     return options;
                                   }(), " --size ")));
    targets.push_back({file, label, ParamSpace(params), sizesOf(kernel, sizes),
                       tuningKey(instance->front(), params, sizes, device, arch), scalars});
  }
  if (targets.empty())
    throw UsageError(fmt::format("nothing to tune in {}: no schedule of {} declares a param, nor does the default policy", file,
                                 untunable.empty() ? "its kernels" : join(untunable, ", ")));
  return targets;
}

TuningRun tune(const TuningTarget& target, const Budget& budget, uint64_t seed, MeasurementBackend& backend,
               TuningDatabase& database, const std::function<void(const Progress&)>& progress) {
  TuningRun run;
  uint64_t planned = target.space.size();
  if (budget.candidates) planned = std::min<uint64_t>(planned, static_cast<uint64_t>(*budget.candidates));
  else if (budget.seconds && planned > static_cast<uint64_t>(kDefaultCandidateBudget)) planned = 0;
  else planned = std::min<uint64_t>(planned, static_cast<uint64_t>(kDefaultCandidateBudget));
  std::vector<Trial> soFar;
  run.outcome = search(target.space, budget, seed, [&](const Candidate& candidate, Phase phase) {
    std::optional<Measurement> recorded = database.find(target.key, candidate);
    Measurement measurement;
    if (recorded) {
      measurement = *recorded;
    } else {
      std::variant<CandidateProgram, Measurement> prepared = prepare(target, candidate);
      measurement = std::holds_alternative<Measurement>(prepared) ? std::get<Measurement>(prepared)
                                                                   : backend.measure(std::get<CandidateProgram>(prepared));
      database.record({target.key, target.kernel, target.file, candidate, measurement});
    }
    run.replayed.push_back(recorded.has_value());
    soFar.push_back({candidate, measurement, phase});
    progress({target, soFar.back(), soFar.size(), planned, recorded.has_value(), bestTrial(soFar)});
    return measurement;
  });
  return run;
}

std::string formatTable(const TuningTarget& target, const TuningRun& run, const std::string& description,
                        const std::string& databasePath) {
  const std::vector<Trial>& trials = run.outcome.trials;
  const Trial& defaults = trials.front();
  bool baseline = defaults.measurement.status == Status::Ok;
  std::vector<size_t> order(trials.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Measurement &x = trials[a].measurement, &y = trials[b].measurement;
    if ((x.status == Status::Ok) != (y.status == Status::Ok)) return x.status == Status::Ok;
    return x.status == Status::Ok && x.milliseconds < y.milliseconds;
  });

  std::string text = fmt::format("{} ({}): {}\n", target.kernel, target.key.sizes, description);
  std::vector<std::vector<std::string>> rows{{"rank"}};
  for (const TuningParam& param : target.space.params()) rows[0].push_back(param.name);
  for (const char* column : {"status", "time", "speed-up", ""}) rows[0].push_back(column);
  std::map<Status, int> counts;
  int rank = 0;
  for (size_t k : order) {
    const Trial& trial = trials[k];
    const Measurement& m = trial.measurement;
    ++counts[m.status];
    bool ok = m.status == Status::Ok;
    std::vector<std::string> row{ok ? std::to_string(++rank) : "-"};
    for (const auto& [name, value] : trial.candidate) row.push_back(std::to_string(value));
    row.push_back(statusName(m.status));
    row.push_back(ok ? formatMilliseconds(m.milliseconds) : "");
    row.push_back(ok && baseline ? fmt::format("{:.2f}x", defaults.measurement.milliseconds / m.milliseconds) : "");
    std::string note = k == 0 ? "(defaults)" : "";
    if (!ok) note += (note.empty() ? "" : " ") + m.message;
    row.push_back(note);
    rows.push_back(row);
  }
  text += alignColumns(rows);

  std::vector<std::string> tally;
  for (const auto& [status, count] : counts) tally.push_back(fmt::format("{} {}", count, statusName(status)));
  size_t replayed = static_cast<size_t>(std::count(run.replayed.begin(), run.replayed.end(), true));
  text += fmt::format("{} of {} candidates ({}): {}; {} measured now, {} from {}\n", trials.size(), target.space.size(),
                      run.outcome.exhaustive ? "exhaustive" : "sampled and refined", join(tally, ", "),
                      trials.size() - replayed, replayed, databasePath);
  if (const Trial* best = bestTrial(trials)) {
    text += fmt::format("best: {} ({}", candidateText(best->candidate), formatMilliseconds(best->measurement.milliseconds));
    if (baseline)
      text += fmt::format(", {:.2f}x the defaults {}", defaults.measurement.milliseconds / best->measurement.milliseconds,
                          candidateText(defaults.candidate));
    text += ")\n";
  } else {
    text += "no candidate succeeded\n";
  }
  return text;
}

std::string formatReport(const std::vector<TuningRecord>& records, const std::vector<std::string>& kernelHashes) {
  std::string text;
  const TuningRecord* group = nullptr;
  std::vector<std::vector<std::string>> rows;
  auto flush = [&] {
    if (!rows.empty()) text += alignColumns(rows);
    rows.clear();
  };
  for (const TuningRecord& record : records) {
    if (!kernelHashes.empty() &&
        std::find(kernelHashes.begin(), kernelHashes.end(), record.key.kernelHash) == kernelHashes.end())
      continue;
    if (!group || !(group->key == record.key) || group->kernel != record.kernel) {
      flush();
      text += fmt::format("{}{} ({}) on {}, {}, from {} [kernel {}, schedule {}]\n", text.empty() ? "" : "\n", record.kernel,
                          record.key.sizes, record.key.device, record.key.arch, record.file, record.key.kernelHash,
                          record.key.scheduleHash);
      group = &record;
    }
    const Measurement& m = record.measurement;
    rows.push_back({candidateText(record.params), statusName(m.status),
                    m.status == Status::Ok ? formatMilliseconds(m.milliseconds) : m.message});
  }
  flush();
  return text.empty() ? "no tuning records\n" : text;
}

std::optional<TuningRecord> bestRecorded(const TuningDatabase& database, const tensor::Kernel& kernel,
                                         const std::map<std::string, DeclaredParam>& params, const std::string& arch,
                                         const std::map<std::string, int64_t>& sizes, std::string& note) {
  note.clear();
  TuningKey key = tuningKey(kernel, params, sizes, "", arch);
  bool sized = std::all_of(kernel.sizes.begin(), kernel.sizes.end(), [&](const std::string& size) { return sizes.count(size) > 0; });
  // The best record of each (sizes, device) group; records() lists the Ok ones of a key fastest first.
  std::map<std::pair<std::string, std::string>, TuningRecord> groups;
  for (const TuningRecord& record : database.records()) {
    const TuningKey& k = record.key;
    if (k.kernelHash != key.kernelHash || k.scheduleHash != key.scheduleHash || k.arch != arch ||
        record.measurement.status != Status::Ok || (sized && k.sizes != key.sizes))
      continue;
    auto [group, added] = groups.emplace(std::make_pair(k.sizes, k.device), record);
    if (!added && record.measurement.milliseconds < group->second.measurement.milliseconds) group->second = record;
  }
  bool timed = std::any_of(groups.begin(), groups.end(), [](const auto& group) { return group.first.second != kStaticModelDevice; });
  if (timed) std::erase_if(groups, [](const auto& group) { return group.first.second == kStaticModelDevice; });
  if (groups.size() == 1) return groups.begin()->second;
  if (groups.size() > 1) {
    std::vector<std::string> available;
    for (const auto& [group, record] : groups) available.push_back(fmt::format("{} on {}", group.first, group.second));
    note = fmt::format("{} has tuned parameters for several sizes or devices ({}); name the sizes with --size to use one",
                       kernel.selector(), join(available, "; "));
  }
  return std::nullopt;
}

}  // namespace emmy::tune
