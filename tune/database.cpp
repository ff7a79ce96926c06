#include "tune/database.h"

#include <sqlite3.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "support/diagnostics.h"
#include "support/files.h"
#include "support/text.h"

namespace emmy::tune {

namespace {

// Bumped when the table changes; a database of another version is refused rather than misread.
constexpr int kSchemaVersion = 1;
// "Emmy" in the header's application_id: what marks a file as a tuning database, so that another
// program's SQLite file is refused untouched.
constexpr int kApplicationId = 0x456d6d79;
constexpr int kBusyTimeoutMs = 10000;
// The columns of `results`, in order: how a database made before the application_id is recognised.
constexpr const char* kColumns = "kernel_hash schedule_hash sizes device arch params status milliseconds message kernel file";

constexpr const char* kSchema = R"sql(
CREATE TABLE results (
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

std::string failureMessage(sqlite3* db, const std::filesystem::path& path) {
  return fmt::format("the tuning database {}: {}", path.string(), sqlite3_errmsg(db));
}

// A prepared statement, finalized on every path out.
class Statement {
public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &statement_, nullptr) != SQLITE_OK) {
      // A statement is prepared against the schema, so a file that is no database fails here already.
      if (sqlite3_errcode(db) != SQLITE_ERROR) throw DatabaseError(failureMessage(db, sqlite3_db_filename(db, "main")));
      throw InternalError(fmt::format("the tuning database rejects {}: {}", sql, sqlite3_errmsg(db)));
    }
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
    if (result != SQLITE_DONE) throw DatabaseError(failureMessage(db_, sqlite3_db_filename(db_, "main")));
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
    throw DatabaseError(fmt::format("the tuning database {}: {}", path.string(), message));
  }
}

// Switching to WAL needs an exclusive lock, and where two connections could deadlock on it SQLite answers
// "database is locked" at once instead of calling the busy handler: tried again until the busy timeout.
// A file system without WAL keeps its journal mode.
void switchToWal(sqlite3* db) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
  for (;;) {
    try {
      Statement(db, "PRAGMA journal_mode=WAL;").step();
      return;
    } catch (const DatabaseError&) {
      if ((sqlite3_errcode(db) != SQLITE_BUSY && sqlite3_errcode(db) != SQLITE_LOCKED) ||
          std::chrono::steady_clock::now() > deadline)
        throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// `file:PATH?immutable=1`, with the characters a URI gives a meaning escaped.
std::string immutableUri(const std::filesystem::path& path) {
  std::string uri = "file:";
  for (char c : std::filesystem::absolute(path).string()) uri += c == '%' || c == '?' || c == '#' ? fmt::format("%{:02X}", c) : std::string(1, c);
  return uri + "?immutable=1";
}

// The number in the one row of `sql`.
int64_t queryNumber(sqlite3* db, const char* sql) {
  Statement query(db, sql);
  query.step();
  return static_cast<int64_t>(query.number(0));
}

// Throws DatabaseError unless `db` is empty (returns true: the schema is to be made) or an Emmy tuning
// database of this version (false); reads only.
bool checkIsTuningDatabase(sqlite3* db, const std::filesystem::path& path) {
  int64_t applicationId = queryNumber(db, "PRAGMA application_id;");
  int64_t version = queryNumber(db, "PRAGMA user_version;");
  int64_t objects = queryNumber(db, "SELECT count(*) FROM sqlite_master;");
  if (applicationId == 0 && version == 0 && objects == 0) return true;
  std::vector<std::string> tables;
  Statement tableNames(db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name;");
  while (tableNames.step()) tables.push_back(tableNames.text(0));
  std::string columns;
  if (tables == std::vector<std::string>{"results"}) {
    Statement info(db, "PRAGMA table_info(results);");
    while (info.step()) columns += (columns.empty() ? "" : " ") + info.text(1);
  }
  // Before the application_id, a tuning database was known by its version and its one table.
  bool marked = applicationId == kApplicationId || (applicationId == 0 && columns == kColumns);
  if (!marked)
    throw DatabaseError(fmt::format("{} is not an Emmy tuning database (it holds {}); it is left as it is: give "
                                    "another --db",
                                    path.string(), tables.empty() ? "no tables" : "the tables " + join(tables, ", ")));
  if (version != kSchemaVersion)
    throw DatabaseError(fmt::format("{} is not a tuning database of this version of Emmy (schema {}, expected {})",
                                    path.string(), version, kSchemaVersion));
  return false;
}

Measurement measurementOf(const Statement& row, int column) {
  std::optional<Status> status = parseStatus(row.text(column));
  return {status.value_or(Status::Crashed), row.number(column + 1), row.text(column + 2)};
}

}  // namespace

std::filesystem::path TuningDatabase::defaultPath() {
  if (const char* path = std::getenv("EMMY_TUNING_DB"); path && *path) return path;
  return cacheFolder() / "tuning.db";
}

TuningDatabase::TuningDatabase(const std::filesystem::path& path, bool create) : path_(path) {
  if (create && path.has_parent_path()) {
    std::error_code ignored;
    std::filesystem::create_directories(path.parent_path(), ignored);
  }
  // A reader opens read-only, so that a database on a read-only disk or of another user can be read.
  open(path.string(), create ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY);
  try {
    if (!create) {
      try {
        checkIsTuningDatabase(db_, path_);
        return;
      } catch (const DatabaseError&) {
        if ((sqlite3_extended_errcode(db_) & 0xff) != SQLITE_CANTOPEN) throw;
      }
      // A WAL database in a folder this process cannot write, with no shared-memory file beside it: no
      // writer has it open, and SQLite reads it only as immutable.
      sqlite3_close(db_);
      db_ = nullptr;
      open(immutableUri(path), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
      checkIsTuningDatabase(db_, path_);
      return;
    }
    // The check and the schema in one write transaction, taken before either: writers that start together
    // on a new file wait for each other (the busy timeout) instead of racing to create the table.
    execute(db_, "BEGIN IMMEDIATE;", path_);
    try {
      if (checkIsTuningDatabase(db_, path_)) {
        execute(db_, kSchema, path_);
        execute(db_, fmt::format("PRAGMA user_version={};", kSchemaVersion).c_str(), path_);
      }
      execute(db_, fmt::format("PRAGMA application_id={};", kApplicationId).c_str(), path_);
      execute(db_, "COMMIT;", path_);
    } catch (...) {
      sqlite3_exec(db_, "ROLLBACK;", nullptr, nullptr, nullptr);
      throw;
    }
    switchToWal(db_);  // not inside a transaction; only once the file is known ours
  } catch (...) {
    sqlite3_close(db_);
    throw;
  }
}

void TuningDatabase::open(const std::string& name, int flags) {
  if (sqlite3_open_v2(name.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
    std::string message = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw DatabaseError(fmt::format("cannot open the tuning database {}: {}", path_.string(), message));
  }
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
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
