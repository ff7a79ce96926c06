// The tuning database: one SQLite file (default ~/.cache/emmy/tuning.db) of candidate results. A record's
// key is the kernel (a hash of its Tensor IR), its schedule (a hash of the directives as written and
// the params' candidates), the sizes, the device and the architecture; its value the params, the status,
// the median time and a message. Each result is written in a transaction of its own, so that killing
// `emmy tune` loses at most the candidate in flight; WAL mode and a busy timeout let other processes
// read (emmy build, emmy tune --report) while one writes.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "support/diagnostics.h"
#include "tune/measurement.h"
#include "tune/param_space.h"

struct sqlite3;

namespace emmy::tune {

struct TuningKey {
  std::string kernelHash;    // 16 hex digits
  std::string scheduleHash;  // 16 hex digits
  std::string sizes;         // "K=512 M=1024 N=256": every size of the kernel, by name
  std::string device;        // "NVIDIA H200", or kStaticModelDevice
  std::string arch;          // "sm_90"
  bool operator==(const TuningKey&) const = default;
};

struct TuningRecord {
  TuningKey key;
  std::string kernel;  // "matmul<f32>": for people, not part of the key
  std::string file;    // the .emmy file it was tuned from, as given: for people, not part of the key
  Candidate params;
  Measurement measurement;
};

// A tuning database that cannot be opened, read or written, or a file that is not one (a usage error).
class DatabaseError : public UsageError {
public:
  using UsageError::UsageError;
};

class TuningDatabase {
public:
  // Opens the database at `path`. With `create` (a writer: emmy tune), read-write, creating it (and its
  // folders) when missing; else read-only, and it must exist (a reader, such as emmy build, never creates
  // one). Throws DatabaseError when it cannot be opened or is not an Emmy tuning database of this version
  // (marked by its application_id, or a database of the one table from before the mark), which is then
  // left untouched.
  TuningDatabase(const std::filesystem::path& path, bool create);
  ~TuningDatabase();
  TuningDatabase(const TuningDatabase&) = delete;
  TuningDatabase& operator=(const TuningDatabase&) = delete;

  // --db PATH, else $EMMY_TUNING_DB, else $XDG_CACHE_HOME/emmy/tuning.db, else ~/.cache/emmy/tuning.db.
  static std::filesystem::path defaultPath();

  const std::filesystem::path& path() const { return path_; }
  // The recorded result of `params` under `key`, if any.
  std::optional<Measurement> find(const TuningKey& key, const Candidate& params) const;
  // Records (or replaces) one result, in a transaction of its own.
  void record(const TuningRecord& record);
  // Every record, ordered by kernel, key, then the Ok ones fastest first, then the failed ones by params.
  std::vector<TuningRecord> records() const;

private:
  // Opens `name` (a path or a URI) as db_ with `flags` and the busy timeout; throws DatabaseError.
  void open(const std::string& name, int flags);

  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
};

}  // namespace emmy::tune
