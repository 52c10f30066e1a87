// Reading input files that may be hostile: only regular files, never more
// than a stated number of bytes.
//
// Note [Bounded input]: every file kiln reads on a user's behalf (config.json,
// tokenizer_config.json, vocab.txt, model.safetensors, --args-file, labeled
// TSV/CSV/JSONL, ...) goes through these checks before its bytes are used:
//  - the path must name a regular file (symbolic links are followed). A FIFO
//    would block open() until some writer appears, and /dev/zero or a
//    character device never ends; both are refused with "is not a regular
//    file (a FIFO)" and the like, checked with stat() before opening and
//    again with fstat() on the descriptor (opened O_NONBLOCK, so a path
//    swapped for a FIFO in between cannot block either);
//  - the file's size is compared with a limit before reading, and reading
//    stops at the limit should the file grow meanwhile;
//  - JSON text is parsed with core/json_util.h, which bounds its size and
//    aborts the parse at a nesting depth limit.
// Every failure is a kiln::Error whose message starts with `what` (the file
// and its role, e.g. "config.json" or "--args-file a.json").
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>
#include <string_view>
#include <span>

namespace kiln {

inline constexpr uint64_t kNoByteLimit = std::numeric_limits<uint64_t>::max();

// kiln::Error "<what>: cannot open: <reason>" when `path` cannot be stat'ed
// (e.g. "No such file or directory"), "<what>: is not a regular file (a FIFO)"
// (a directory, a socket, a character device, ...) when it is something else.
void check_regular_file(const std::string& path, const std::string& what);

// Opens a regular file read-only (Note [Bounded input]) and returns the file
// descriptor, which the caller closes; *size_bytes gets the file's size.
// kiln::Error as check_regular_file, or "<what>: file is N bytes, over the
// limit of M bytes" when it is larger than max_bytes.
int open_regular_file(const std::string& path, const std::string& what, uint64_t max_bytes,
                      uint64_t* size_bytes);

// The whole content of a regular file of at most max_bytes bytes.
std::string read_file_bounded(const std::string& path, const std::string& what, uint64_t max_bytes);

// Writes the concatenated chunks to `path` atomically (temporary file in the
// same directory, fsync, rename, fsync of the directory); on failure `path` is
// untouched and the temporary file removed. Throws kiln::Error naming `path`.
void write_file_atomic(const std::string& path, const std::vector<std::span<const uint8_t>>& chunks);
// The same for one piece of text.
void write_file_atomic(const std::string& path, std::string_view text);

}  // namespace kiln
