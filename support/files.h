// The files Emmy's commands read and write: an input read whole only when it is a regular file of a
// bounded size (a folder, /dev/zero or a pipe is refused, not read forever), and outputs that appear all
// together or not at all (a full disk leaves no truncated .cu and no .cu without its .h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace emmy {

// A file the machine refused to write or read (a full disk, a missing permission): exit code 1, as
// `PROGRAM: error: MESSAGE`; the message names the file and the reason.
class FileError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// The largest source file the frontend reads: no hand-written or generated .emmy file comes near it.
constexpr uint64_t kMaxSourceFileBytes = 8ull << 20;

// The whole content of `path` when it is a regular file of at most `maxBytes`; otherwise std::nullopt
// and `whyNot` says why ("it is a directory", "it is not a regular file", "it is larger than 8 MiB",
// "No such file or directory").
std::optional<std::string> readRegularFile(const std::filesystem::path& path, uint64_t maxBytes, std::string& whyNot);

// Writes every (path, bytes) pair, all or none: each to a fresh temporary name in its folder (which must
// exist), with every write and the close checked, then all renamed into place. When one fails, the
// temporaries are removed, no target is touched, and FileError names the file and the reason. A target
// that exists and is not a regular file (/dev/stdout, /dev/full) is written directly, as it cannot be
// replaced by a rename.
void writeFilesTogether(const std::vector<std::pair<std::filesystem::path, std::string>>& files);

// Emmy's cache folder (the tuning database, precompiled headers): $XDG_CACHE_HOME/emmy, else
// ~/.cache/emmy. Not created here.
std::filesystem::path cacheFolder();

}  // namespace emmy
