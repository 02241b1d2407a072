"""FINDINGS.md's first-screen line on the lag-adaptive study (``results/adaptive/``), read from ``results/`` alone.

``rebuild_docs`` puts ``adaptive_summary`` in the block ``summary`` once a unit of the study has finished:
the units finished (``manifest.csv``) and, once ``report`` has written ``verdicts.csv``, each method's calls
against the per-lag oracle and the robust ε, with d and its 95% interval (SAT's rows descriptive).
"""

from __future__ import annotations

import hashlib
import os

from vaco_jax.analysis import results
from vaco_jax.studies.kit_findings import num

ADAPTIVE = os.path.join("results", "adaptive")


def _calls(rows: list[dict], method: str) -> str:
    """'against the oracle: uniform B 1 non-inferior (+0.01 [−0.03, 0.05]), ...; against robust: ...'."""
    parts = []
    for reference in dict.fromkeys(r["reference"] for r in rows if r["method"] == method):
        cells = [f"{r['cell']} {r['verdict']} ({num(r['estimate'], '+.2f')} [{num(r['low'], '+.2f')}, "
                 f"{num(r['high'], '+.2f')}])" for r in rows if r["method"] == method and r["reference"] == reference]
        parts.append(f"against {reference}: " + ", ".join(cells))
    return "; ".join(parts)


def adaptive_summary(root: str) -> str | None:
    out = os.path.join(root, ADAPTIVE)
    path, listed = os.path.join(out, "protocol.json"), os.path.join(out, "manifest.csv")
    if not os.path.exists(path) or not os.path.exists(listed) or not results.read_table(listed):
        return None
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    line = (f"- **The lag-adaptive step-size test** (`results/adaptive/`, protocol sha256 `{digest[:8]}…`, fixed "
            f"before its runs): {len(results.read_table(listed))} units finished "
            "(`python -m vaco_jax.studies.adaptive plan` lists every unit; d is the pooled normalised AUC of the "
            "method minus the reference's, margin 0.1 against the per-lag oracle, Holm over 14 tests).")
    verdicts = os.path.join(out, "verdicts.csv")
    if os.path.exists(verdicts):
        rows = results.read_table(verdicts)
        line += " " + " ".join(f"{m}: {_calls(rows, m)}." for m in dict.fromkeys(r["method"] for r in rows))
    return line
