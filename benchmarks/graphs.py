"""The benchmark graphs: real ones unpacked from Debian packages, and synthetic ones.

Real graphs are unpacked by ``benchmarks/fetch_graphs.sh`` into
``${GNNC_DATA:-$HOME/.cache/gnnc/data}``; ``available_graphs()`` lists those
present, and ``load(name)`` builds a runtime ``Graph``. The small graphs
committed in ``examples/data`` (4elt, polblogs) are always available.

Synthetic graphs are generated with fixed seeds, vectorised:

- ``rmat(scale, edge_factor)``: R-MAT / Kronecker with Graph500's parameters
  (a, b, c) = (0.57, 0.19, 0.19): 2**scale vertices, edge_factor * 2**scale edges.
- ``featgraph_rand100k()``: FeatGraph's rand-100K: 20K vertices of average
  in-degree 2000 and 80K of average in-degree 100, sources uniform over all
  100K vertices (48M edges); ``scale`` shrinks the vertex counts.
- ``relational_edges(scale, edge_factor, R)``: a typed graph, R-MAT endpoints
  and Zipf-distributed relation types (a few relations hold most edges, as in
  knowledge graphs).

``wordnet()`` is WordNet 3.0 as a typed graph (``gnnc.graph.wordnet``): the
package's data files if fetch_graphs.sh unpacked them, else the committed copy.

Each generator has an ``*_edges`` twin returning ``(src, dst, num_vertices)``
int64 arrays for baselines that do not take a gnnc ``Graph``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gnnc.errors import GraphError
from gnnc.graph import io as graph_io

if TYPE_CHECKING:
    from gnnc.graph.graph import Graph
    from gnnc.graph.wordnet import WordNet

EdgeArrays = tuple[np.ndarray, np.ndarray, int]

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_DATA = REPO / "examples" / "data"

_METIS_DIR = Path("libmetis-doc/usr/share/doc/libmetis-dev/examples/graphs")
_GT_DIR = Path("python3-graph-tool/usr/lib/python3/dist-packages/graph_tool/collection")

# name -> path inside the data folder, as fetch_graphs.sh unpacks the packages
PACKAGE_GRAPHS: dict[str, Path] = {
    "4elt": _METIS_DIR / "4elt.graph",
    "copter2": _METIS_DIR / "copter2.graph",
    "mdual": _METIS_DIR / "mdual.graph",
    "email-Enron": _GT_DIR / "email-Enron.gt.gz",
    "cond-mat": _GT_DIR / "cond-mat.gt.gz",
    "cond-mat-2005": _GT_DIR / "cond-mat-2005.gt.gz",
    "astro-ph": _GT_DIR / "astro-ph.gt.gz",
    "as-22july06": _GT_DIR / "as-22july06.gt.gz",
    "pgp-strong": _GT_DIR / "pgp-strong-2009.gt.gz",
    "polblogs": _GT_DIR / "polblogs.gt.gz",
}

#: WordNet's data files inside the data folder, and the committed processed copy
WORDNET_DIR = Path("wordnet-base/usr/share/wordnet")
WORDNET_COPY = EXAMPLE_DATA / "wordnet.npz"

# committed copies, used when the packages have not been fetched
EXAMPLE_GRAPHS: dict[str, Path] = {
    "4elt": EXAMPLE_DATA / "4elt.npz",
    "polblogs": EXAMPLE_DATA / "polblogs.npz",
}


def data_dir() -> Path:
    """Where fetch_graphs.sh puts the packages: ``$GNNC_DATA`` or ``~/.cache/gnnc/data``."""
    env = os.environ.get("GNNC_DATA")
    return Path(env) if env else Path.home() / ".cache" / "gnnc" / "data"


def available_graphs(data: str | os.PathLike[str] | None = None) -> dict[str, Path]:
    """Name -> file of every benchmark graph present (package files first, then the committed copies)."""
    root = Path(data) if data is not None else data_dir()
    found = {name: root / rel for name, rel in PACKAGE_GRAPHS.items() if (root / rel).is_file()}
    for name, path in EXAMPLE_GRAPHS.items():
        if name not in found and path.is_file():
            found[name] = path
    return found


def path_of(name: str, data: str | os.PathLike[str] | None = None) -> Path:
    graphs = available_graphs(data)
    if name not in graphs:
        known = sorted(set(PACKAGE_GRAPHS) | set(EXAMPLE_GRAPHS))
        hint = " (run benchmarks/fetch_graphs.sh to unpack it)" if name in PACKAGE_GRAPHS else ""
        raise GraphError(f"benchmark graph {name!r} not found{hint}; known graphs: {', '.join(known)}")
    return graphs[name]


def edges(name: str, *, symmetric: bool | None = None) -> EdgeArrays:
    """``(src, dst, num_vertices)`` of a benchmark graph."""
    return graph_io.read_edges(path_of(name), symmetric=symmetric)


def load(name: str, *, symmetric: bool | None = None) -> Graph:
    """A benchmark graph as a runtime ``Graph``."""
    return graph_io.load_graph(path_of(name), symmetric=symmetric)


def wordnet(data: str | os.PathLike[str] | None = None) -> WordNet:
    """WordNet 3.0 (``gnnc.graph.wordnet.WordNet``): the unpacked package's files, else the committed copy."""
    from gnnc.graph.wordnet import load_wordnet

    root = Path(data) if data is not None else data_dir()
    if (root / WORDNET_DIR / "data.noun").is_file():
        return load_wordnet(root / WORDNET_DIR)
    if WORDNET_COPY.is_file():
        return load_wordnet(WORDNET_COPY)
    raise GraphError(f"WordNet not found in {root / WORDNET_DIR} nor {WORDNET_COPY}: run benchmarks/fetch_graphs.sh")


# ---------------------------------------------------------------------- synthetic


def _graph(arrays: EdgeArrays) -> Graph:
    from gnnc.graph.graph import Graph

    src, dst, n = arrays
    return Graph.from_coo(src, dst, num_vertices=n)


def rmat_edges(
    scale: int,
    edge_factor: int = 16,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    seed: int = 0,
    *,
    permute: bool = True,
) -> EdgeArrays:
    """R-MAT edges as Graph500's Kronecker generator makes them: one quadrant choice per bit.

    2**scale vertices and edge_factor * 2**scale directed edges (self loops and
    duplicates included, as Graph500 generates them). With ``permute`` the
    vertex labels and the edge order are shuffled, as Graph500 does, so that
    the hubs are not all at low ids.
    """
    if not 0 <= scale <= 40 or edge_factor < 0:
        raise ValueError(f"rmat: need 0 <= scale <= 40 and edge_factor >= 0, got {scale}, {edge_factor}")
    d = 1.0 - a - b - c
    if min(a, b, c, d) < 0:
        raise ValueError(f"rmat: a, b, c must be probabilities summing to at most 1, got {a}, {b}, {c}")
    n = 1 << scale
    m = edge_factor * n
    rng = np.random.default_rng(seed)
    src = np.zeros(m, dtype=np.int64)
    dst = np.zeros(m, dtype=np.int64)
    # one uniform draw per bit picks the quadrant: [0, a) a, [a, a+b) b, [a+b, a+b+c) c, rest d
    ab, abc = np.float32(a + b), np.float32(a + b + c)
    fa = np.float32(a)
    r = np.empty(m, dtype=np.float32)
    bit_row = np.empty(m, dtype=bool)
    bit_col = np.empty(m, dtype=bool)
    for bit in range(scale):
        rng.random(out=r, dtype=np.float32)
        np.greater_equal(r, ab, out=bit_row)
        np.greater_equal(r, abc, out=bit_col)
        bit_col |= (r >= fa) & ~bit_row
        src |= bit_row.astype(np.int64) << bit
        dst |= bit_col.astype(np.int64) << bit
    if permute:
        relabel = rng.permutation(n)
        order = rng.permutation(m)
        src, dst = relabel[src[order]], relabel[dst[order]]
    return src, dst, n


def rmat(
    scale: int,
    edge_factor: int = 16,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    seed: int = 0,
    *,
    permute: bool = True,
) -> Graph:
    """An R-MAT graph (see ``rmat_edges``) as a runtime ``Graph``."""
    return _graph(rmat_edges(scale, edge_factor, a, b, c, seed, permute=permute))


def relational_edges(
    scale: int, edge_factor: int, num_relations: int, seed: int = 0, zipf: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``(src, dst, edge_type, num_vertices)``: an R-MAT graph (``rmat_edges``) whose edges draw their
    relation types independently, relation ``r`` with probability proportional to ``1 / (r + 1) ** zipf``."""
    if num_relations < 1:
        raise ValueError(f"relational_edges: need at least one relation, got {num_relations}")
    src, dst, n = rmat_edges(scale, edge_factor, seed=seed)
    weight = 1.0 / np.arange(1, num_relations + 1, dtype=np.float64) ** zipf
    rng = np.random.default_rng(seed + 1)
    edge_type = rng.choice(num_relations, size=len(src), p=weight / weight.sum())
    return src, dst, edge_type.astype(np.int64), n


def featgraph_rand100k_edges(seed: int = 0, scale: float = 1.0) -> EdgeArrays:
    """FeatGraph's rand-100K: a dense part and a sparse part with uniform sources.

    Vertices ``0 .. H-1`` (H = 20K * scale) receive on average 2000 in-edges,
    vertices ``H .. H+L-1`` (L = 80K * scale) on average 100; every source is
    uniform over all ``H + L`` vertices, and so is each destination within its
    part. ``scale`` shrinks the vertex counts and keeps the average degrees, so
    ``E = 48M * scale``. Duplicate edges may occur, as in any uniform draw.
    Edges are grouped by part: the dense part's edges come first.
    """
    if scale <= 0:
        raise ValueError(f"featgraph_rand100k: scale must be positive, got {scale}")
    hubs = max(1, round(20_000 * scale))
    rest = max(1, round(80_000 * scale))
    n = hubs + rest
    m_hubs, m_rest = hubs * 2000, rest * 100
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, size=m_hubs + m_rest, dtype=np.int64)
    dst = np.empty(m_hubs + m_rest, dtype=np.int64)
    dst[:m_hubs] = rng.integers(0, hubs, size=m_hubs, dtype=np.int64)
    dst[m_hubs:] = rng.integers(hubs, n, size=m_rest, dtype=np.int64)
    return src, dst, n


def featgraph_rand100k(seed: int = 0, scale: float = 1.0) -> Graph:
    """FeatGraph's rand-100K (see ``featgraph_rand100k_edges``) as a runtime ``Graph``."""
    return _graph(featgraph_rand100k_edges(seed, scale))
