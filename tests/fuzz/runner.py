"""The child of tests/fuzz/harness.py: `python -m tests.fuzz.runner TARGET CASES LOG TMPDIR`.

Runs each pickled case of TARGET (tests/fuzz/cases.py) in order, writing
`{"start": i}` to LOG before case i and its result after, flushed, so the
parent knows which case a crash or hang happened in.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import traceback
from pathlib import Path


def main(argv: list[str]) -> int:
    target, cases_path, log_path, tmp = argv
    cases = pickle.loads(Path(cases_path).read_bytes())
    from gnnc.errors import GnncError
    from tests.fuzz import cases as executors

    run = executors.TARGETS[target]
    context = executors.Context(Path(tmp))
    with open(log_path, "a", buffering=1) as log:
        for i, case in enumerate(cases):
            log.write(json.dumps({"start": i}) + "\n")
            log.flush()
            os.fsync(log.fileno())
            try:
                outcome, detail = run(case, context)
            except GnncError as exc:
                outcome, detail = "clean", f"{type(exc).__name__}: {str(exc)[:300]}"
            except executors.Wrong as exc:
                outcome, detail = "wrong", str(exc)[:2000]
            except Exception as exc:  # the point of the suite: anything else is a finding
                outcome = "raw"
                detail = f"{type(exc).__name__}: {exc}"[:500] + "\n" + "".join(traceback.format_exc(limit=-6))[-2500:]
            log.write(json.dumps({"index": i, "outcome": outcome, "detail": detail}) + "\n")
            log.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
