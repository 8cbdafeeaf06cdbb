"""The fuzz suite's counts: printed at the end of a session, and written to $GNNC_FUZZ_REPORT if set.

Under xdist each worker sends its counts to the controller when it ends
(`workeroutput`), which adds them up before printing.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections import Counter

from tests.fuzz.harness import COUNTS, OUTCOMES, PROFILE

_KEY = "gnnc_fuzz_counts"


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller adds these up
        workeroutput[_KEY] = json.dumps({t: dict(c) for t, c in COUNTS.items()})


if importlib.util.find_spec("xdist") is not None:

    def pytest_testnodedown(node, error):
        for target, counts in json.loads(getattr(node, "workeroutput", {}).get(_KEY, "{}")).items():
            COUNTS.setdefault(target, Counter()).update(counts)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not COUNTS or hasattr(config, "workeroutput"):
        return
    terminalreporter.section(f"fuzz counts ({PROFILE} profile)")
    for target, counts in sorted(COUNTS.items()):
        tried = sum(counts.values())
        parts = ", ".join(f"{o} {counts.get(o, 0)}" for o in OUTCOMES)
        terminalreporter.write_line(f"{target}: {tried} inputs: {parts}")
    path = os.environ.get("GNNC_FUZZ_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump({"profile": PROFILE, "counts": {t: dict(c) for t, c in COUNTS.items()}}, f, indent=1)
