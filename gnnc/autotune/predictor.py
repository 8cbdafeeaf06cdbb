"""Schedule prediction without tuning (uGrapher): nearest tuned cases, by graph and kernel statistics.

`gnnc tune` measures a set of candidate schedules on one (kernel, graph,
sizes) case and keeps every time as a record. The predictor answers "which
schedule for this new case?" from those records: it describes each case by
a few numbers,

    graph:  log2 V, log2 E, log2 mean in-degree, in-degree std / mean,
            log2 max in-degree
    kernel: log2 of the feature row it accumulates, log2 of the bytes it
            gathers per source, in-edge walks, phases, vertex / edge result

scales each by its spread over the records (kernel numbers weigh triple, so
a neighbour is first of all the same kind of operator), takes the k nearest
records, and for each candidate averages the log(time / unscheduled time)
those of them that measured it found, weighted by closeness. The candidate with
the lowest predicted time wins; with no support at all the predictor
abstains and the default heuristic decides.

Candidates are named relative to the row so records carry over between
feature sizes: `vectorize row` is `vectorize F` for the call's F, `tile
features row/2` is half of it. A candidate key may end in `; threads N`,
a thread count other than all cores.

The shipped model (`schedule_model.json` beside this file) holds the records
of tuning runs on the graphs in `benchmarks/tune_predictor.py`'s training
set on the machine named in it; `gnnc tune --retrain` refits a local model
from local records (`~/.cache/gnnc/tuning/model.json`), which then wins.
This module imports no compiler: a call with `schedule="auto"` stays light.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gnnc.ir import abi
from gnnc.ir.schedule import sizes_text

SHIPPED_MODEL = Path(__file__).with_name("schedule_model.json")
LOCAL_MODEL = "model.json"
MODEL_VERSION = 1

FEATURE_NAMES = (
    "log2_vertices",
    "log2_edges",
    "log2_mean_degree",
    "degree_cv",
    "log2_max_degree",
    "log2_row",
    "log2_source_bytes",
    "edge_walks",
    "phases",
    "vertex_result",
    "edge_result",
)
#: Kernel features weigh this much more than graph features in the distance.
KERNEL_WEIGHT = 3.0
NEIGHBOURS = 5
#: Candidates measured by fewer neighbours than this are not predicted.
MIN_SUPPORT = 2

THREADS_SUFFIX = "; threads "

_log = logging.getLogger(__name__)


# ------------------------------------------------------------------ names


def canonical_schedule(directives: str, row: int) -> str:
    """Directive text with the row-relative sizes named relative to the row (see the docstring)."""
    out = []
    for line in _lines(directives):
        words = line.split()
        if words[0] == "vectorize" and len(words) == 2 and words[1].isdigit() and int(words[1]) == row:
            line = "vectorize row"
        elif words[0] == "specialize":
            line = "specialize"  # the case's own sizes
        elif words[:2] == ["tile", "features"] and len(words) == 3 and words[2].isdigit():
            t = int(words[2])
            if t and row % t == 0 and row // t > 1:
                line = f"tile features row/{row // t}"
        out.append(line)
    return "; ".join(out)


def concrete_schedule(canonical: str, row: int, sizes: str = "") -> str | None:
    """The directive text of a canonical name for a row of `row` elements and a call of
    `sizes` (the words after `specialize`), or None if it has no meaning there."""
    out = []
    for line in _lines(canonical):
        words = line.split()
        if words == ["vectorize", "row"]:
            line = f"vectorize {row}"
        elif words == ["specialize"]:
            if not sizes:
                return None
            line = f"specialize {sizes}"
        elif words[:2] == ["tile", "features"] and len(words) == 3 and words[2].startswith("row/"):
            k = int(words[2][4:])
            if row % k or row // k < 1:
                return None
            line = f"tile features {row // k}"
        out.append(line)
    return "; ".join(out)


def split_threads(key: str) -> tuple[str, int | None]:
    """`"vectorize row; threads 1"` -> `("vectorize row", 1)`; ValueError for a `threads` part
    that is not a positive integer."""
    if THREADS_SUFFIX.lstrip("; ") in key:
        parts = [p.strip() for p in key.split(";")]
        threads = [p for p in parts if p.startswith("threads ")]
        rest = [p for p in parts if not p.startswith("threads ") and p]
        words = threads[-1].split() if threads else []
        if len(words) != 2 or not words[1].isdigit() or int(words[1]) < 1:
            raise ValueError(f"candidate {key!r}: 'threads' needs a positive integer")
        return "; ".join(rest), int(words[1])
    return key, None


def join_threads(schedule: str, threads: int | None) -> str:
    if threads is None:
        return schedule
    return f"{schedule}; threads {threads}" if schedule else f"threads {threads}"


def _lines(text: str) -> list[str]:
    return [p.strip() for p in text.replace("\n", ";").split(";") if p.strip()]


# ------------------------------------------------------------------ features


def case_features(graph_signature: dict, traits: dict) -> np.ndarray:
    """The numbers one case is described by (FEATURE_NAMES)."""
    v = graph_signature["num_vertices"]
    e = graph_signature["num_edges"]
    mean = graph_signature["deg_mean"]
    return np.array(
        [
            math.log2(v + 1),
            math.log2(e + 1),
            math.log2(mean + 1),
            graph_signature["deg_std"] / mean if mean > 0 else 0.0,
            math.log2(graph_signature["deg_max"] + 1),
            math.log2(max(1, traits["row"])),
            math.log2(max(1, traits["source_bytes"])),
            float(traits["edge_walks"]),
            float(traits["phases"]),
            float(traits["vertex_result"]),
            float(traits["edge_result"]),
        ],
        dtype=np.float64,
    )


def kernel_traits(abi_record: abi.AbiRecord, params: Any, results: Any, dims: dict[str, int], itemsize: int) -> dict:
    """What the predictor knows of a kernel: its ABI's phases and its tensors' domains."""
    phases = abi_record.phases or [abi.Phase(None, 0)]
    row = phases[-1].row_size(dims)
    source_bytes = 0
    for p in params:
        if p.domain == "V":
            source_bytes += p.row_elements(dims) * itemsize
    return {
        "row": int(row) if row is not None else 1,
        "source_bytes": source_bytes,
        "edge_walks": sum(ph.edge_walks for ph in phases),
        "phases": len(phases),
        "vertex_result": any(r.domain == "V" for r in results),
        "edge_result": any(r.domain == "E" for r in results),
        # the words of `specialize` for this call (not a feature: names its candidates)
        "sizes": sizes_text({d: dims[d] for d in abi_record.dims if d in dims}),
        # walks `vectorize edges` can split, or could with the sizes compiled in (not a feature:
        # names its candidates)
        "lane_walks": (abi_record.lanes.walks or abi_record.lanes.reducing) if abi_record.lanes else 0,
    }


# ------------------------------------------------------------------ model


@dataclass
class Prediction:
    key: str
    #: predicted time relative to the unscheduled kernel (< 1 is faster)
    ratio: float
    support: int


def _case_of(r: dict) -> tuple[str, dict | None]:
    """(the case's id, the case) of one tuning record; None without a measured baseline.
    A malformed record raises KeyError, TypeError or ValueError."""
    times = r.get("times", {})
    base = times.get(r.get("baseline", ""))
    if not _finite(base) or base <= 0:
        return "", None
    row = int(r["traits"]["row"])
    ratios = {}
    for key, t in times.items():
        if _finite(t) and t > 0:
            sched, threads = split_threads(key)
            ratios[join_threads(canonical_schedule(sched, row), threads)] = math.log(t / base)
    features = case_features(r["graph"], r["traits"])
    if not np.all(np.isfinite(features)):
        raise ValueError("features that are not finite")
    case_id = json.dumps([r.get("kernel"), r["graph"], r["dims"]], sort_keys=True)
    label = f"{r.get('kernel', '?')} on {r.get('graph_name', '?')} {r['dims']}"
    return case_id, {"features": features.tolist(), "ratios": ratios, "label": label}


class Model:
    """The nearest-neighbour model: records' features and their candidates' log time ratios."""

    def __init__(self, cases: list[dict], machine: str = ""):
        self.cases = cases
        self.machine = machine
        feats = np.array([c["features"] for c in cases], dtype=np.float64).reshape(len(cases), len(FEATURE_NAMES))
        scale = feats.std(axis=0) if len(cases) > 1 else np.ones(len(FEATURE_NAMES))
        scale[scale < 1e-6] = 1.0
        weight = np.ones(len(FEATURE_NAMES))
        weight[5:] = KERNEL_WEIGHT
        self._weight = weight / scale
        self._feats = feats * self._weight

    @classmethod
    def fit(cls, records: list[dict], machine: str = "") -> Model:
        """One case per record with a measured unscheduled time; later records of a case win."""
        by_case: dict[str, dict] = {}
        for r in records:
            try:
                case_id, case = _case_of(r)
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
                _log.debug("tuning record skipped: malformed (%.200r)", r)
                continue
            if case is not None:
                by_case[case_id] = case
        return cls(list(by_case.values()), machine)

    def to_json(self) -> str:
        return json.dumps(
            {"version": MODEL_VERSION, "machine": self.machine, "features": FEATURE_NAMES, "cases": self.cases},
            indent=0,
        )

    @classmethod
    def from_json(cls, text: str) -> Model | None:
        """The model, or None for text that is not one (`parse` says why)."""
        try:
            return cls.parse(text)
        except ValueError:
            return None

    @classmethod
    def parse(cls, text: str) -> Model | None:
        """The model, or None for text of another version or feature set (ignored, not misread);
        raises ValueError naming what is wrong with malformed text."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object")
        features = data.get("features", [])
        if data.get("version") != MODEL_VERSION or not isinstance(features, list) or features != list(FEATURE_NAMES):
            return None
        cases = data.get("cases", [])
        problem = _cases_problem(cases)
        if problem is not None:
            raise ValueError(problem)
        machine = data.get("machine", "")
        return cls(cases, machine if isinstance(machine, str) else "")

    def rank(self, graph_signature: dict, traits: dict, keys: list[str] | None = None) -> list[Prediction]:
        """Candidates by predicted time, fastest first (canonical keys)."""
        if not self.cases:
            return []
        query = case_features(graph_signature, traits) * self._weight
        dist = np.sqrt(((self._feats - query) ** 2).sum(axis=1))
        order = np.argsort(dist, kind="stable")
        wanted = set(keys) if keys is not None else None
        sums: dict[str, list[float]] = {}
        # the k nearest cases vote; a far case that alone measured some
        # candidate must not make that candidate look good here
        used, total = 0, 0.0
        for i in order:
            ratios = {k: r for k, r in self.cases[i]["ratios"].items() if wanted is None or k in wanted}
            if not ratios:
                continue
            if used == NEIGHBOURS:
                break
            used += 1
            w = 1.0 / (dist[i] + 0.05)
            total += w
            for key, ratio in ratios.items():
                acc = sums.setdefault(key, [0.0, 0.0, 0])
                acc[0] += w * ratio
                acc[1] += w
                acc[2] += 1
        # and a candidate measured only by the farther part of the neighbourhood is not predicted
        preds = [
            Prediction(k, math.exp(s / w), int(n))
            for k, (s, w, n) in sums.items()
            if n >= MIN_SUPPORT and w >= 0.5 * total
        ]
        preds.sort(key=lambda p: p.ratio)
        return preds

    def predict(self, graph_signature: dict, traits: dict, keys: list[str] | None = None) -> str | None:
        """The predicted best candidate's concrete key (directives; threads), or None without support."""
        for p in self.rank(graph_signature, traits, keys):
            sched, threads = split_threads(p.key)
            concrete = concrete_schedule(sched, traits["row"], traits.get("sizes", ""))
            if concrete is not None:
                return join_threads(concrete, threads)
        return None


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _cases_problem(cases: Any) -> str | None:
    """What makes a model's cases unusable (the first problem), or None."""
    if not isinstance(cases, list):
        return f"'cases' is a JSON {type(cases).__name__}, not a list"
    for i, case in enumerate(cases):
        if not isinstance(case, dict):
            return f"case {i} is not an object"
        features, ratios = case.get("features"), case.get("ratios")
        if not isinstance(features, list) or len(features) != len(FEATURE_NAMES) or not all(map(_finite, features)):
            return f"case {i} has no list of {len(FEATURE_NAMES)} finite features"
        if not isinstance(ratios, dict) or not all(isinstance(k, str) and _finite(r) for k, r in ratios.items()):
            return f"case {i} has no object of finite ratios"
        for key in ratios:
            try:
                split_threads(key)
            except ValueError as exc:
                return f"case {i}: {exc}"
    return None


def local_model_path() -> Path:
    from gnnc.autotune.cache import tuning_dir

    return tuning_dir() / LOCAL_MODEL


def load_model() -> Model | None:
    """The local model if `gnnc tune --retrain` wrote one, else the shipped one."""
    for path in (local_model_path(), SHIPPED_MODEL):
        model = _load(str(path), _mtime(path))
        if model is not None:
            return model
    return None


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return -1


@functools.lru_cache(maxsize=4)
def _load(path: str, mtime: int) -> Model | None:
    if mtime < 0:
        return None
    try:
        return Model.parse(Path(path).read_text(encoding="utf-8"))
    except OSError:
        return None
    except ValueError as exc:  # not JSON, not UTF-8, or malformed cases
        _log.warning("schedule model %s ignored: %s", path, exc)
        return None


def model_source() -> str:
    """Where `load_model` reads from, for messages."""
    return str(local_model_path()) if os.path.exists(local_model_path()) else str(SHIPPED_MODEL)
