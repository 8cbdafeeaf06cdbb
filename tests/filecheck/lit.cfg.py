# lit runs this file with `config` and `lit_config` defined
# ruff: noqa: F821
"""lit configuration of gnnc's per-pass IR tests: `lit -v tests/filecheck`.

Each `*.mlir` file holds an input IR and the RUN lines that push it through
one pass (`gnnc-opt %s -p NAME | filecheck %s`), as xDSL's and MLIR's
tests/filecheck do. The substitutions run this checkout: `gnnc-opt` is
`python -m gnnc.tools.opt` with the repository root first on PYTHONPATH
(an installed console script may belong to another copy), and `filecheck`
the PyPI FileCheck of the same Python. Lit's own files (`Output/`, the test
times) go to a temporary directory, never into the source tree; the `exec_root`
parameter moves them (tests/test_filecheck.py gives each run its own).
"""

import os
import sys
import tempfile

import lit.formats

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

config.name = "gnnc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = lit_config.params.get("exec_root") or os.path.join(tempfile.gettempdir(), "gnnc-filecheck")

config.environment["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
# gnnc-opt compiles nothing; should a pass ever reach the compile cache, it is a private one
config.environment["GNNC_CACHE_DIR"] = os.path.join(config.test_exec_root, "gnnc-cache")

# the tools by name, as a RUN line spells them (not inside a path or another word)
python = f'"{sys.executable}"'
config.substitutions.append((r"(?<![\w./-])gnnc-opt(?![\w./-])", f"{python} -m gnnc.tools.opt"))
config.substitutions.append((r"(?<![\w./-])filecheck(?![\w./-])", f"{python} -m filecheck"))
