#include "support/files.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

namespace emmy {

namespace fs = std::filesystem;

namespace {

std::string sizeText(uint64_t bytes) {
  if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  return fmt::format("{} bytes", bytes);
}

// Closes the descriptor it holds when it goes out of scope.
class Descriptor {
public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  int get() const { return fd_; }
  // Closes it now; false (errno set) when the close reports an error, e.g. a write that failed late.
  bool close() {
    int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0;
  }

private:
  int fd_;
};

// Writes all of `bytes` (write may take less than asked); false with errno set on an error.
bool writeAll(int fd, const std::string& bytes) {
  for (size_t done = 0; done < bytes.size();) {
    ssize_t written = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      if (written == 0) errno = EIO;
      return false;
    }
    done += static_cast<size_t>(written);
  }
  return true;
}

[[noreturn]] void failWriting(const fs::path& path, int error) {
  throw FileError(fmt::format("cannot write {}: {}", path.string(), std::strerror(error)));
}

// Opens a new file beside `target` under a name no other process uses: `.NAME.PID.K.tmp`.
std::pair<int, fs::path> createTemporaryBeside(const fs::path& target) {
  for (int attempt = 0;; ++attempt) {
    fs::path temporary = target.parent_path() /
                         fmt::format(".{}.{}.{}.tmp", target.filename().string(), static_cast<long>(::getpid()), attempt);
    int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return {fd, temporary};
    if (errno != EEXIST) failWriting(target, errno);
  }
}

// Writes `bytes` to the open `fd` and closes it; throws FileError naming `target` on any error.
void writeAndClose(int fd, const fs::path& target, const std::string& bytes) {
  Descriptor file(fd);
  if (!writeAll(file.get(), bytes)) failWriting(target, errno);
  if (!file.close()) failWriting(target, errno);
}

bool isNonRegularFile(const fs::path& path) {
  struct stat status;
  return ::stat(path.c_str(), &status) == 0 && !S_ISREG(status.st_mode);
}

}  // namespace

std::optional<std::string> readRegularFile(const fs::path& path, uint64_t maxBytes, std::string& whyNot) {
  Descriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));  // a FIFO must not block the open
  struct stat status;
  if (file.get() < 0 || ::fstat(file.get(), &status) != 0) {
    whyNot = std::strerror(errno);
    return std::nullopt;
  }
  if (S_ISDIR(status.st_mode)) {
    whyNot = "it is a directory";
    return std::nullopt;
  }
  if (!S_ISREG(status.st_mode)) {
    whyNot = "it is not a regular file";
    return std::nullopt;
  }
  if (static_cast<uint64_t>(status.st_size) > maxBytes) {
    whyNot = fmt::format("it is larger than {} ({} bytes)", sizeText(maxBytes), status.st_size);
    return std::nullopt;
  }
  std::string text(static_cast<size_t>(status.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {  // a file that shrinks meanwhile ends early; one that grows is cut at its size
    ssize_t got = ::read(file.get(), text.data() + done, text.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      whyNot = std::strerror(errno);
      return std::nullopt;
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  text.resize(done);
  return text;
}

void writeFilesTogether(const std::vector<std::pair<fs::path, std::string>>& files) {
  std::vector<std::pair<fs::path, fs::path>> renames;  // (temporary, target)
  auto removeTemporaries = [&] {
    std::error_code ignored;
    for (const auto& [temporary, target] : renames) fs::remove(temporary, ignored);
  };
  try {
    for (const auto& [target, bytes] : files) {
      if (isNonRegularFile(target)) continue;  // written last, below
      auto [fd, temporary] = createTemporaryBeside(target);
      renames.emplace_back(temporary, target);
      writeAndClose(fd, target, bytes);
    }
    for (const auto& [target, bytes] : files) {
      if (!isNonRegularFile(target)) continue;
      int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0) failWriting(target, errno);
      writeAndClose(fd, target, bytes);
    }
    for (size_t k = 0; k < renames.size(); ++k) {
      const auto& [temporary, target] = renames[k];
      if (::rename(temporary.c_str(), target.c_str()) != 0) {
        int error = errno;
        renames.erase(renames.begin(), renames.begin() + static_cast<std::ptrdiff_t>(k));
        failWriting(target, error);
      }
    }
  } catch (...) {
    removeTemporaries();
    throw;
  }
}

std::filesystem::path cacheFolder() {
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache) return std::filesystem::path(cache) / "emmy";
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home && *home ? home : ".") / ".cache" / "emmy";
}

}  // namespace emmy
