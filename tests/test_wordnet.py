"""WordNet as a typed graph (gnnc.graph.wordnet): parsing, validation, features, the committed copy."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import pytest

from gnnc.errors import GraphError
from gnnc.graph import limits
from gnnc.graph.wordnet import LEXNAMES, POINTERS, WordNet, load_wordnet

REPO = Path(__file__).resolve().parent.parent
COMMITTED = REPO / "examples" / "data" / "wordnet.npz"
PACKAGE_DIR = Path(os.environ.get("GNNC_DATA", Path.home() / ".cache" / "gnnc" / "data")) / (
    "wordnet-base/usr/share/wordnet"
)

LICENCE = "  1 This software and database is being provided to you, the LICENSEE, by  \n  2   \n"
#: A tiny database in the files' format: two nouns, a verb (with a frame), an adjective and its
#: satellite, an adverb; a repeated pointer, lexical and semantic pointers across parts.
FIXTURE = {
    "noun": LICENCE + "00001740 03 n 01 entity 0 002 ~ 00001930 n 0000 ~ 00001930 n 0000 | that which is perceived; "
    '"the entity is perceived"  \n'
    "00001930 03 n 02 physical_entity 0 thing 1 003 @ 00001740 n 0000 + 00000100 v 0201 "
    "! 00000200 a 0000 | an entity that has physical existence  \n",
    "verb": LICENCE + "00000100 29 v 01 exist 0 001 + 00001930 n 0102 01 + 02 00 | have an existence  \n",
    "adj": LICENCE + "00000200 00 a 01 real 0 002 ! 00000300 s 0000 & 00000300 s 0000 | being or occurring in fact  \n"
    "00000300 00 s 01 unreal(a) 0 000 | \n",
    "adv": LICENCE + "00000400 02 r 01 really 0 001 \\ 00000200 a 0101 | in reality  \n",
}
REL = {p.symbol: r for r, p in enumerate(POINTERS)}


def write_db(d: Path, files: dict[str, str] | None = None) -> Path:
    d.mkdir(exist_ok=True)
    for part, text in (files or FIXTURE).items():
        (d / f"data.{part}").write_text(text)
    return d


def edges(wn: WordNet) -> list[tuple[int, int, str]]:
    return [(int(s), int(d), POINTERS[t].symbol) for s, d, t in zip(wn.src, wn.dst, wn.edge_type)]


def test_tables():
    assert len(POINTERS) == 26 and len({p.symbol for p in POINTERS}) == 26
    assert len(LEXNAMES) == 45 and LEXNAMES[3] == "noun.Tops" and LEXNAMES[44] == "adj.ppl"


def test_parse_fixture(tmp_path):
    wn = load_wordnet(write_db(tmp_path / "db"))
    assert wn.num_vertices == 6 and wn.num_relations == 26 and wn.num_classes == 45
    assert [wn.synset_id(v) for v in range(6)] == [
        "n00001740",
        "n00001930",
        "v00000100",
        "a00000200",
        "s00000300",
        "r00000400",
    ]
    assert wn.labels.tolist() == [3, 3, 29, 0, 0, 2]
    # the repeated hyponym pointer is one edge; pointers keep the files' order
    assert edges(wn) == [
        (0, 1, "~"),
        (1, 0, "@"),
        (1, 2, "+"),
        (1, 3, "!"),
        (2, 1, "+"),
        (3, 4, "!"),
        (3, 4, "&"),
        (5, 3, "\\"),
    ]
    assert wn.gloss_words(0) == "that which is perceived the entity is perceived".split()
    assert wn.gloss_words(4) == []
    for arr in (wn.src, wn.dst, wn.edge_type, wn.labels, wn.tokens, wn.token_ptr):
        assert arr.dtype == np.int64
    assert wn.edge_index().shape == (2, 8)


def test_graph_carries_relations(tmp_path):
    wn = load_wordnet(write_db(tmp_path / "db"))
    g = wn.graph()
    assert g.num_vertices == 6 and g.num_edges == 8 and g.num_relations == 26
    np.testing.assert_array_equal(g.edge_type, wn.edge_type)
    np.testing.assert_array_equal(g.edge_index(), wn.edge_index())


def test_features_hash_words(tmp_path):
    wn = load_wordnet(write_db(tmp_path / "db"))
    dim = 16
    x = wn.features(dim)
    assert x.shape == (6, dim) and x.dtype == np.float32
    for v in range(6):
        want = np.zeros(dim)
        for w in wn.gloss_words(v):
            want[zlib.crc32(w.encode()) % dim] += 1
        if want.any():
            want /= np.linalg.norm(want)
        np.testing.assert_allclose(x[v], want, rtol=1e-6)
    assert not x[4].any()  # an empty gloss
    assert wn.features(8, dtype=np.float64).dtype == np.float64
    for bad in (0, -1, 2.5, True):
        with pytest.raises(GraphError, match="dim"):
            wn.features(bad)


def test_subgraph(tmp_path):
    wn = load_wordnet(write_db(tmp_path / "db"))
    sub = wn.subgraph([3, 1, 4])
    assert sub.num_vertices == 3
    assert edges(sub) == [(1, 0, "!"), (0, 2, "!"), (0, 2, "&")]
    assert sub.labels.tolist() == [0, 3, 0]
    assert sub.gloss_words(0) == wn.gloss_words(3) and sub.gloss_words(2) == []
    assert [sub.synset_id(v) for v in range(3)] == [wn.synset_id(3), wn.synset_id(1), wn.synset_id(4)]
    with pytest.raises(GraphError, match="distinct"):
        wn.subgraph([1, 1])
    with pytest.raises(GraphError, match="lie in"):
        wn.subgraph([6])
    with pytest.raises(GraphError, match="1-D"):
        wn.subgraph([[0]])


def test_save_load_round_trip(tmp_path):
    wn = load_wordnet(write_db(tmp_path / "db"))
    wn.save(tmp_path / "wn.npz")
    back = load_wordnet(tmp_path / "wn.npz")
    for name in ("src", "dst", "edge_type", "labels", "synset_type", "synset_offset", "token_ptr", "tokens"):
        np.testing.assert_array_equal(getattr(back, name), getattr(wn, name))
        assert getattr(back, name).dtype == getattr(wn, name).dtype, name
    assert back.vocabulary == wn.vocabulary
    np.testing.assert_array_equal(back.features(32), wn.features(32))


def _replace(part: str, old: str, new: str) -> dict[str, str]:
    files = dict(FIXTURE)
    assert old in files[part]
    files[part] = files[part].replace(old, new, 1)
    return files


@pytest.mark.parametrize(
    "part, old, new, message",
    [
        ("noun", "| that which", "that which", "no '|'"),
        ("noun", "00001740 03 n", "00001740 77 n", "lex_filenum 77 out of range"),
        ("noun", "00001740 03 n", "0000x740 03 n", "synset_offset must be a decimal number"),
        ("noun", "00001740 03 n", "00001740 03 v", "a synset of type 'v' in data.noun"),
        ("noun", "00001740 03 n", "00001740 03 q", "ss_type must be one of"),
        ("noun", "entity 0 002", "entity 0 009", "ends before its pointer_symbol"),
        ("noun", "n 01 entity", "n 00 entity", "w_cnt is 0"),
        ("noun", "n 01 entity", "n zz entity", "w_cnt must be a hexadecimal number"),
        ("noun", "~ 00001930 n 0000 ~", "?? 00001930 n 0000 ~", "unknown pointer symbol '\\?\\?'"),
        ("noun", "~ 00001930 n 0000 ~", "~ 00001931 n 0000 ~", "pointer to offset 00001931, which is no synset"),
        ("noun", "~ 00001930 n 0000 ~", "~ 00001930 x 0000 ~", "pointer's pos must be one of"),
        ("noun", "n 0000 ~ 00001930 n 0000 |", "n 0000 ~ 00001930 n 0000 extra |", "unexpected field"),
        ("noun", "00001930 03 n 02", "00001740 03 n 02", "already defined on line 3"),
        ("verb", "01 + 02 00 |", "01 - 02 00 |", "a verb frame starts with '\\+'"),
        ("verb", "01 + 02 00 |", "02 + 02 00 |", "ends before its '\\+' of a frame"),
        ("adv", "\\ 00000200 a 0101", "\\ 00000100 a 0101", "which is no synset of data.adj"),
    ],
)
def test_malformed_files(tmp_path, part, old, new, message):
    d = write_db(tmp_path / "db", _replace(part, old, new))
    with pytest.raises(GraphError, match=message) as info:
        load_wordnet(d)
    assert f"data.{part}:" in str(info.value)


def test_missing_files(tmp_path):
    d = write_db(tmp_path / "db")
    (d / "data.adv").unlink()
    with pytest.raises(GraphError, match="no data.adv"):
        load_wordnet(d)
    with pytest.raises(GraphError, match="no such file"):
        load_wordnet(tmp_path / "nothing.npz")
    with pytest.raises(GraphError, match="no such file or directory"):
        load_wordnet(tmp_path / "nothing")
    (tmp_path / "x.txt").write_text("")
    with pytest.raises(GraphError, match="expected a directory"):
        load_wordnet(tmp_path / "x.txt")


def test_file_size_is_bounded(tmp_path, monkeypatch):
    d = write_db(tmp_path / "db")
    monkeypatch.setattr(limits, "text_bytes_limit", lambda: 100)
    with pytest.raises(GraphError, match="larger than 100 bytes"):
        load_wordnet(d)


def _saved(tmp_path: Path, **changes) -> Path:
    wn = load_wordnet(write_db(tmp_path / "db"))
    wn.save(tmp_path / "wn.npz")
    with np.load(tmp_path / "wn.npz") as z:
        arrays = {k: z[k] for k in z.files}
    for k, v in changes.items():
        if v is None:
            del arrays[k]
        else:
            arrays[k] = v
    np.savez(tmp_path / "bad.npz", **arrays)
    return tmp_path / "bad.npz"


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"labels": None}, "no labels"),
        ({"format_version": np.int64(99)}, "format version"),
        ({"labels": np.array([3, 3, 29, 0, 0, 45])}, "'labels' holds values in \\[0, 45\\]"),
        ({"src": np.array([0, 1, 1, 1, 2, 3, 3, 6])}, "'src' holds values"),
        ({"dst": np.array([1, 0, 2])}, "'src' and 'dst' have 8 and 3 entries"),
        ({"edge_type": np.array([26] * 8)}, "'edge_type' holds values"),
        ({"edge_type": np.zeros(7, np.uint8)}, "'edge_type' has 7 entries, expected 8"),
        ({"src": np.zeros(8, np.float32)}, "'src' must be a 1-D integer array"),
        ({"synset_type": np.full(6, ord("x"), np.uint8)}, "'synset_type' holds a code"),
        ({"token_ptr": np.array([0, 9, 5, 10, 14, 14, 17])}, "'token_ptr' must rise"),
        ({"tokens": np.array([10_000])}, "'tokens' holds values"),
        ({"vocabulary": np.array([1.0])}, "'vocabulary' must be a 1-D uint8 array"),
        ({"vocabulary": np.frombuffer(b"\xff\xfe", np.uint8)}, "not UTF-8"),
    ],
)
def test_malformed_npz(tmp_path, changes, message):
    with pytest.raises(GraphError, match=message):
        load_wordnet(_saved(tmp_path, **changes))


def test_npz_not_a_zip(tmp_path):
    (tmp_path / "wn.npz").write_bytes(b"not a zip file")
    with pytest.raises(GraphError, match="not a readable .npz"):
        load_wordnet(tmp_path / "wn.npz")


@pytest.mark.skipif(not COMMITTED.exists(), reason="examples/data/wordnet.npz is not in this checkout")
def test_committed_copy():
    wn = load_wordnet(COMMITTED)
    assert (wn.num_vertices, wn.num_edges, len(wn.vocabulary)) == (117_659, 364_552, 55_397)
    assert np.bincount(wn.labels, minlength=45).min() > 0  # every lexicographer file has synsets
    assert np.bincount(wn.edge_type, minlength=26).min() > 0  # and every pointer symbol edges
    assert wn.synset_id(0) == "n00001740" and wn.gloss_words(0)[:3] == ["that", "which", "is"]
    counts = np.bincount(wn.synset_type, minlength=128)
    assert [int(counts[ord(c)]) for c in "nvasr"] == [82_115, 13_767, 7_463, 10_693, 3_621]


@pytest.mark.slow
@pytest.mark.skipif(
    not (COMMITTED.exists() and PACKAGE_DIR.is_dir()), reason="needs benchmarks/fetch_graphs.sh's wordnet-base"
)
def test_committed_copy_is_the_package():
    parsed, committed = load_wordnet(PACKAGE_DIR), load_wordnet(COMMITTED)
    for name in ("src", "dst", "edge_type", "labels", "synset_type", "synset_offset", "token_ptr", "tokens"):
        np.testing.assert_array_equal(getattr(parsed, name), getattr(committed, name))
    assert parsed.vocabulary == committed.vocabulary


# ------------------------------------------------------------------ the example and the benchmark


def _load_script(path: Path, name: str):
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not COMMITTED.exists(), reason="examples/data/wordnet.npz is not in this checkout")
def test_example_neighbourhood_is_connected_and_distinct():
    example = _load_script(REPO / "examples" / "wordnet_rgcn.py", "wordnet_rgcn_example")
    wn = load_wordnet(COMMITTED)
    piece = example.neighbourhood(wn, 500, seed=3)
    assert len(piece) == 500 and len(np.unique(piece)) == 500
    sub = wn.subgraph(piece)
    assert sub.num_edges >= sub.num_vertices - 1  # a breadth-first piece: a spanning tree's edges at least


@pytest.mark.slow
@pytest.mark.skipif(not COMMITTED.exists(), reason="examples/data/wordnet.npz is not in this checkout")
def test_example_gnnc_matches_pyg_on_a_piece(capsys):
    pytest.importorskip("torch_geometric")
    example = _load_script(REPO / "examples" / "wordnet_rgcn.py", "wordnet_rgcn_example")
    accuracy = example.main(["--compare", "--vertices", "600", "--epochs", "4", "--seeds", "2", "--threads", "2"])
    assert set(accuracy) == {"rgcn", "rgat"}
    for model, by_backend in accuracy.items():
        assert set(by_backend) == {"gnnc", "pyg"}
        # the same weights (gnnc.nn initialises as PyG), the same dropout: the same predictions
        assert abs(by_backend["gnnc"] - by_backend["pyg"]) <= 1.0, (model, by_backend)
        assert 0 < by_backend["gnnc"] <= 100
    assert "gnnc - pyg" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.skipif(not COMMITTED.exists(), reason="examples/data/wordnet.npz is not in this checkout")
def test_benchmark_quick_mode(tmp_path):
    """benchmarks/hetero.py end to end at its CI size: every graph and model timed against
    PyG's, and one cell's peak memory measured in its subprocesses (each child imports torch
    and PyG and builds the graph again, 10 s apiece: every cell's took 3 minutes of the suite)."""
    import json
    import subprocess
    import sys

    pytest.importorskip("torch_geometric")
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def run(name: str, *options: str) -> list[dict]:
        out = tmp_path / f"{name}.json"
        proc = subprocess.run(
            [sys.executable, str(REPO / "benchmarks" / "hetero.py"), "--quick", "--systems", "gnnc,pyg"]
            + [*options, "--json", str(out)],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "target (>= 3x the best baseline" in proc.stdout
        return json.loads(out.read_text())["cells"]

    cells = run("time", "--parts", "time")
    assert {(c["graph"], c["model"]) for c in cells} == {
        (g, m) for g in ("wordnet", "synthetic") for m in ("rgcn", "rgat")
    }
    for cell in cells:
        assert isinstance(cell["gnnc"], float) and cell["gnnc"] > 0, cell
        assert isinstance(cell["pyg"], float), cell
        # every system starts from the same weights: the first forwards agree
        for key, value in cell.items():
            if key.endswith("max|err|"):
                assert value < 1e-3, (key, cell)
    (cell,) = run("memory", "--parts", "memory", "--graphs", "synthetic", "--models", "rgat")
    memory = cell["memory MiB"]
    assert isinstance(memory["gnnc"], float) and isinstance(memory["pyg"], float), memory
    assert memory["gnnc"] < memory["pyg"], memory
