#!/usr/bin/env python3
"""Note [Where each test runs] (tests/CMakeLists.txt): kiln_tests' cases that
cannot run in the sanitizer build -- they skip themselves under
KILN_SANITIZE_BUILD, or wherever a CUDA device (the emulated one included) is
present -- must match KILN_RELEASE_TESTS, the filter of the cases the release
build's `make test-main` runs; otherwise CI would run them nowhere.

Usage: check_test_partition.py SOURCE_DIR. Exit status 1 names each case
outside the filter."""
import fnmatch
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
cmake = (root / "tests" / "CMakeLists.txt").read_text()
m = re.search(r'set\(KILN_RELEASE_TESTS "([^"]+)"\)', cmake)
if not m:
    sys.exit("check_test_partition: no set(KILN_RELEASE_TESTS \"...\") in tests/CMakeLists.txt")
patterns = m.group(1).split(":")

# What makes a case skip in the sanitizer build.
SKIPS = (re.compile(r"#ifdef\s+KILN_SANITIZE_BUILD"), re.compile(r"cuda::is_available\(\)\)\s*GTEST_SKIP"))
test_re = re.compile(r"^TEST(?:_F|_P)?\((\w+),\s*(\w+)\)", re.M)

checked, outside = 0, []
for src in sorted((root / "tests").glob("*.cpp")):
    text = src.read_text()
    starts = list(test_re.finditer(text))
    for i, t in enumerate(starts):
        body = text[t.end():starts[i + 1].start() if i + 1 < len(starts) else len(text)]
        if not any(s.search(body) for s in SKIPS):
            continue
        checked += 1
        name = f"{t.group(1)}.{t.group(2)}"
        if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
            outside.append(f"{src.name}: {name}")

if outside:
    print("check_test_partition: these cases skip in the sanitizer build but are not in KILN_RELEASE_TESTS"
          f" ({':'.join(patterns)}), so no CI build would run them:")
    for o in outside:
        print("  " + o)
    sys.exit(1)
if checked == 0:
    sys.exit("check_test_partition: found no case that skips in the sanitizer build: is the pattern stale?")
print(f"check_test_partition: {checked} cases that skip in the sanitizer build all run in the release build")
