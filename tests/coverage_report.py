#!/usr/bin/env python3
"""Line coverage of the library sources (src/) after the tests ran in a --coverage build.

Usage: coverage_report.py [--min PERCENT] BUILD_DIR [SOURCE_DIR]

Runs gcov (JSON output, GCC >= 9) on every .gcda file of the build and merges the results per
source line: a line counts as covered if any object file that compiled it executed it (the
micro-kernel body is compiled once per ISA). Only files under SOURCE_DIR/src/ count (SOURCE_DIR
defaults to the directory above this script). Prints one line per file and ends with exactly
    coverage: NN.N% of lines in src/
and exits 1 if that is below --min.
"""
import json
import os
import subprocess
import sys


def gcov_json(gcda, gcov="gcov"):
    """The JSON documents gcov prints for one .gcda file."""
    result = subprocess.run([gcov, "--json-format", "--stdout", "-o", os.path.dirname(gcda), gcda],
                            capture_output=True, text=True, cwd=os.path.dirname(gcda))
    if result.returncode != 0:
        raise RuntimeError("gcov failed on %s: %s" % (gcda, result.stderr.strip()))
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def main():
    args = sys.argv[1:]
    minimum = 0.0
    if len(args) >= 2 and args[0] == "--min":
        minimum = float(args[1])
        args = args[2:]
    if len(args) not in (1, 2):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    build = os.path.abspath(args[0])
    source = os.path.abspath(args[1] if len(args) == 2 else
                             os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    src = os.path.join(source, "src") + os.sep
    gcov = os.environ.get("GCOV", "gcov")
    lines = {}  # (file, line) -> executed
    gcdas = []
    for root, _, files in os.walk(build):
        gcdas += [os.path.join(root, f) for f in files if f.endswith(".gcda")]
    if not gcdas:
        print("coverage_report: no .gcda files under %s: run the tests first" % build,
              file=sys.stderr)
        return 1
    for gcda in sorted(gcdas):
        for doc in gcov_json(gcda, gcov):
            cwd = doc.get("current_working_directory", build)
            for entry in doc["files"]:
                path = os.path.normpath(os.path.join(cwd, entry["file"]))
                if not path.startswith(src):
                    continue
                for line in entry["lines"]:
                    key = (path, line["line_number"])
                    lines[key] = lines.get(key, False) or line["count"] > 0
    if not lines:
        print("coverage_report: no line of %s was compiled with coverage" % src, file=sys.stderr)
        return 1
    per_file = {}
    for (path, _), executed in lines.items():
        total, hit = per_file.get(path, (0, 0))
        per_file[path] = (total + 1, hit + executed)
    for path in sorted(per_file):
        total, hit = per_file[path]
        print("%6.1f%%  %4d / %4d  %s" % (100.0 * hit / total, hit, total,
                                          os.path.relpath(path, source)))
    total = len(lines)
    hit = sum(lines.values())
    percent = 100.0 * hit / total
    if percent < minimum:
        print("coverage_report: below the required %.1f%%" % minimum)
    print("coverage: %.1f%% of lines in src/" % percent)
    return 1 if percent < minimum else 0


if __name__ == "__main__":
    sys.exit(main())
