#include "tune/database.h"

#include <sqlite3.h>

#include <cstdlib>

#include <fmt/format.h>

#include "support/diagnostics.h"

namespace emmy::tune {

namespace {

// Bumped when the table changes; a database of another version is refused rather than misread.
constexpr int kSchemaVersion = 1;
constexpr int kBusyTimeoutMs = 10000;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS results (
  kernel_hash TEXT NOT NULL,
  schedule_hash TEXT NOT NULL,
  sizes TEXT NOT NULL,
  device TEXT NOT NULL,
  arch TEXT NOT NULL,
  params TEXT NOT NULL,
  status TEXT NOT NULL,
  milliseconds REAL NOT NULL,
  message TEXT NOT NULL,
  kernel TEXT NOT NULL,
  file TEXT NOT NULL,
  PRIMARY KEY (kernel_hash, schedule_hash, sizes, device, arch, params)
);
)sql";

// A prepared statement, finalized on every path out.
class Statement {
public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &statement_, nullptr) != SQLITE_OK)
      throw InternalError(fmt::format("the tuning database rejects {}: {}", sql, sqlite3_errmsg(db)));
  }
  ~Statement() { sqlite3_finalize(statement_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int index, const std::string& text) {
    sqlite3_bind_text(statement_, index, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int index, double value) {
    sqlite3_bind_double(statement_, index, value);
    return *this;
  }
  // Binds the five columns of `key` from `index` on.
  Statement& bindKey(int index, const TuningKey& key) {
    return bind(index, key.kernelHash).bind(index + 1, key.scheduleHash).bind(index + 2, key.sizes).bind(index + 3, key.device)
        .bind(index + 4, key.arch);
  }
  // True while there is a row.
  bool step() {
    int result = sqlite3_step(statement_);
    if (result == SQLITE_ROW) return true;
    if (result != SQLITE_DONE)
      throw UsageError(fmt::format("the tuning database {}: {}", sqlite3_db_filename(db_, "main"), sqlite3_errmsg(db_)));
    return false;
  }
  std::string text(int column) const {
    const unsigned char* value = sqlite3_column_text(statement_, column);
    return value ? reinterpret_cast<const char*>(value) : "";
  }
  double number(int column) const { return sqlite3_column_double(statement_, column); }

private:
  sqlite3* db_;
  sqlite3_stmt* statement_ = nullptr;
};

void execute(sqlite3* db, const char* sql, const std::filesystem::path& path) {
  char* error = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error ? error : "unknown error";
    sqlite3_free(error);
    throw UsageError(fmt::format("the tuning database {}: {}", path.string(), message));
  }
}

Measurement measurementOf(const Statement& row, int column) {
  std::optional<Status> status = parseStatus(row.text(column));
  return {status.value_or(Status::Crashed), row.number(column + 1), row.text(column + 2)};
}

}  // namespace

std::filesystem::path TuningDatabase::defaultPath() {
  if (const char* path = std::getenv("EMMY_TUNING_DB"); path && *path) return path;
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache)
    return std::filesystem::path(cache) / "emmy" / "tuning.db";
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home && *home ? home : ".") / ".cache" / "emmy" / "tuning.db";
}

TuningDatabase::TuningDatabase(const std::filesystem::path& path, bool create) : path_(path) {
  if (create && path.has_parent_path()) {
    std::error_code ignored;
    std::filesystem::create_directories(path.parent_path(), ignored);
  }
  // Readers open read-write too: a reader of a WAL database may need to create its shared-memory file.
  int flags = create ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READWRITE;
  if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
    std::string message = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    throw UsageError(fmt::format("cannot open the tuning database {}: {}", path.string(), message));
  }
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
  try {
    if (create) {
      execute(db_, "PRAGMA journal_mode=WAL;", path_);
      execute(db_, kSchema, path_);
      Statement version(db_, "PRAGMA user_version;");
      version.step();
      if (version.number(0) == 0) execute(db_, fmt::format("PRAGMA user_version={};", kSchemaVersion).c_str(), path_);
    }
    Statement version(db_, "PRAGMA user_version;");
    version.step();
    if (static_cast<int>(version.number(0)) != kSchemaVersion)
      throw UsageError(fmt::format("{} is not a tuning database of this version of Emmy (schema {}, expected {})",
                                   path.string(), static_cast<int>(version.number(0)), kSchemaVersion));
  } catch (...) {
    sqlite3_close(db_);
    throw;
  }
}

TuningDatabase::~TuningDatabase() { sqlite3_close(db_); }

std::optional<Measurement> TuningDatabase::find(const TuningKey& key, const Candidate& params) const {
  Statement query(db_, "SELECT status, milliseconds, message FROM results WHERE kernel_hash = ?1 AND schedule_hash = ?2 "
                       "AND sizes = ?3 AND device = ?4 AND arch = ?5 AND params = ?6;");
  query.bindKey(1, key).bind(6, candidateText(params));
  if (!query.step()) return std::nullopt;
  return measurementOf(query, 0);
}

void TuningDatabase::record(const TuningRecord& record) {
  // One statement in autocommit mode is one transaction: written whole or not at all.
  Statement insert(db_, "INSERT OR REPLACE INTO results (kernel_hash, schedule_hash, sizes, device, arch, params, status, "
                        "milliseconds, message, kernel, file) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11);");
  const Measurement& m = record.measurement;
  insert.bindKey(1, record.key)
      .bind(6, candidateText(record.params))
      .bind(7, std::string(statusName(m.status)))
      .bind(8, m.milliseconds)
      .bind(9, m.message)
      .bind(10, record.kernel)
      .bind(11, record.file);
  insert.step();
}

std::vector<TuningRecord> TuningDatabase::records() const {
  Statement query(db_, "SELECT kernel_hash, schedule_hash, sizes, device, arch, params, status, milliseconds, message, kernel, "
                       "file FROM results ORDER BY kernel, kernel_hash, schedule_hash, sizes, device, arch, status != 'ok', "
                       "CASE WHEN status = 'ok' THEN milliseconds ELSE 0 END, params;");
  std::vector<TuningRecord> records;
  while (query.step()) {
    TuningRecord record;
    record.key = {query.text(0), query.text(1), query.text(2), query.text(3), query.text(4)};
    record.params = parseCandidateText(query.text(5)).value_or(Candidate{});
    record.measurement = measurementOf(query, 6);
    record.kernel = query.text(9);
    record.file = query.text(10);
    records.push_back(std::move(record));
  }
  return records;
}

}  // namespace emmy::tune
