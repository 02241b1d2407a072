"""Summed test durations of two runs of the suite, to show a change kept the suite's cost.

Each run is pytest's JUnit XML report (``--junitxml``), made on the same idle machine with the same
command, e.g. the suite before a change (in a worktree of that commit) and after it:

    python -m pytest -n 2 --dist worksteal -q -p no:cacheprovider --junitxml=runs/tests_before.xml
    python -m pytest -n 2 --dist worksteal -q -p no:cacheprovider --junitxml=runs/tests_after.xml
    python -m benchmarks.suite_durations runs/tests_before.xml runs/tests_after.xml

Prints the sum of every test's time in each report, the sums over the tests both reports hold and
pass in both (same file and name: the fair comparison when tests were added or removed), their ratio,
and the test files whose common tests changed most. A test's time is what pytest records for it (setup, call and
teardown); skipped tests count with their (small) times.
"""

from __future__ import annotations

import argparse
import collections
import sys
import xml.etree.ElementTree as ET


def read(path: str) -> tuple[dict[str, float], set[str]]:
    """test id (file::name) -> seconds, and the ids that failed or errored, from a JUnit XML report."""
    times: dict[str, float] = {}
    failed: set[str] = set()
    for case in ET.parse(path).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        key = f"{classname.replace('.', '/')}.py::{name}"
        times[key] = times.get(key, 0.0) + float(case.get("time", 0.0) or 0.0)
        if case.find("failure") is not None or case.find("error") is not None:
            failed.add(key)
    if not times:
        raise SystemExit(f"{path}: no test cases in this JUnit XML report")
    return times, failed


def compare(before: dict[str, float], after: dict[str, float], top: int = 8,
            failed: set[str] = frozenset()) -> str:
    """``failed``: ids that failed or errored in either report; left out of the common comparison (a
    failure's time is not the test's)."""
    common = sorted((set(before) & set(after)) - set(failed))
    b_common = sum(before[k] for k in common)
    a_common = sum(after[k] for k in common)
    lines = [f"before: {len(before)} tests, {sum(before.values()):,.1f} s summed",
             f"after:  {len(after)} tests, {sum(after.values()):,.1f} s summed",
             f"common: {len(common)} tests, {b_common:,.1f} s before, {a_common:,.1f} s after, "
             f"ratio {a_common / b_common:.3f}" if b_common > 0 else "common: no time recorded"]
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for k in common:
        f = k.split("::", 1)[0]
        by_file[f][0] += before[k]
        by_file[f][1] += after[k]
    lines.append("largest changes among the common tests, by file (after - before):")
    for f, (b, a) in sorted(by_file.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0]))[:top]:
        lines.append(f"  {f:<40} {b:8.1f} s -> {a:8.1f} s ({a - b:+.1f})")
    only_before, only_after = set(before) - set(after), set(after) - set(before)
    lines.append(f"only before: {len(only_before)} tests, {sum(before[k] for k in only_before):,.1f} s; "
                 f"only after: {len(only_after)} tests, {sum(after[k] for k in only_after):,.1f} s")
    if failed:
        lines.append(f"failed or errored (left out of the common tests): {', '.join(sorted(failed))}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", help="JUnit XML report of the suite before the change")
    parser.add_argument("after", help="JUnit XML report of the suite after it")
    args = parser.parse_args(argv)
    (before, failed_before), (after, failed_after) = read(args.before), read(args.after)
    print(compare(before, after, failed=failed_before | failed_after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
