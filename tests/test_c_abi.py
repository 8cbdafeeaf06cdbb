"""The C ABI from C: a program built with gcc against the generated header calls the `.so`.

For every example under every CPU schedule the tests use (`ir_snapshot.CPU_SCHEDULES`;
a schedule a kernel refuses is skipped), one C program per compiled object
builds the graph with the header's helpers (`gnnc_graph_from_coo`, and
`gnnc_graph_from_csr` where edge ids allow), prepares each kernel's plan,
runs it and prints the results; they must equal gnnc's numpy reference. The
graph has an isolated vertex, a self loop and duplicate edges. The
exhaustive product is `slow`; a subset that takes every optional argument
group at least once runs in the fast tier.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import gnnc
from gnnc.driver import compiler
from gnnc.ir import abi
from gnnc.target.cpu.header import render_header, write_header
from tests.helpers import EXAMPLES, assert_matches, example_or_skip, reference_example
from tests.ir_snapshot import CPU_SCHEDULES
from tests.strategies import random_inputs

CC = os.environ.get("CC", "cc")

#: 7 vertices: 6 has no edge, 1 -> 1 is a self loop, 0 -> 1 is there twice.
SRC = [0, 1, 2, 3, 1, 0, 4, 2, 5, 4, 3, 0]
DST = [1, 2, 0, 1, 1, 1, 2, 4, 4, 5, 5, 3]
NUM_VERTICES = 7
#: Relation types of the edges (every graph has them; kernels without rel(e) ignore them):
#: the two 0 -> 1 edges share one, 2 has no edges.
TYPES = [1, 0, 3, 0, 1, 1, 0, 3, 1, 0, 0, 1]
NUM_RELATIONS = 4
THREADS = 3

#: Sizes of the examples' dims where the schedule compiles none in.
DIMS = {"F": 5, "H": 2, "D": 3, "D1": 4, "D2": 3, "K": 3, "N": 4}

#: Every optional argument group, the in-CSR by position, sorted edge ids and a degree order at least once.
FAST = [
    ("gat", None),
    ("gcn", "specialize F 32; stream outputs"),
    ("gat", "partition src 3"),
    ("attention", "order edges hilbert"),
    ("mlp_aggr", "group neighbors 3\ntile features 4\nsort degree"),
    ("gcn_norm", "reorder rcm; vectorize 8"),
    ("gat", "edges sorted"),
    ("rgcn", None),
    ("rgat", "edges sorted"),
]

CASES = [
    pytest.param(name, schedule, marks=() if (name, schedule) in FAST else pytest.mark.slow)
    for name in sorted(p.stem for p in EXAMPLES.glob("*.gnn"))
    for schedule in CPU_SCHEDULES
]


def _c_array(c_type: str, name: str, values: np.ndarray) -> str:
    items = ", ".join(float(v).hex() if c_type in ("float", "double") else str(int(v)) for v in values.ravel())
    return f"static const {c_type} {name}[] = {{{items or '0'}}};"


def _graphs(sorted_ids: bool) -> dict[str, tuple[gnnc.Graph, str]]:
    """The graphs a program runs on, each with the C that builds it into `g`."""
    coo = gnnc.Graph.from_coo(
        np.array(SRC), np.array(DST), num_vertices=NUM_VERTICES, edge_type=TYPES, num_relations=NUM_RELATIONS
    )
    if sorted_ids:
        coo, _ = coo.sorted_by_destination()
    graphs = {"coo": (coo, "gnnc_graph_from_coo(&g, V, V, E, coo_src, coo_dst)")}
    if not sorted_ids:
        # a CSR by source numbers the edges by source: ids a kernel with `edges sorted` refuses
        csr = gnnc.Graph.from_csr(
            coo.out_indptr,
            coo.out_dst,
            num_vertices=NUM_VERTICES,
            edge_type=coo.edge_type[coo.out_eid],
            num_relations=NUM_RELATIONS,
        )
        graphs["csr"] = (csr, "gnnc_graph_from_csr(&g, V, V, csr_indptr, csr_indices)")
    return graphs


def _program(module, inputs: dict, dims: dict, graphs: dict) -> str:
    coo = graphs["coo"][0]
    lines = [
        '#include "kernels.h"',
        "#include <stdio.h>",
        "",
        f"#define V {NUM_VERTICES}",
        f"#define E {coo.num_edges}",
        f"#define NUM_RELATIONS {NUM_RELATIONS}",
        _c_array("int64_t", "coo_src", coo.src),
        _c_array("int64_t", "coo_dst", coo.dst),
        _c_array("int64_t", "coo_type", coo.edge_type),
    ]
    if "csr" in graphs:
        lines += [_c_array("int64_t", "csr_indptr", coo.out_indptr), _c_array("int64_t", "csr_indices", coo.out_dst)]
        lines.append(_c_array("int64_t", "csr_type", graphs["csr"][0].edge_type))
    main = ["int main(void)", "{", "    gnnc_graph g;", "    int status = 0;"]
    for kernel in module.metadata["kernels"]:
        name, c_type = kernel["name"], {"f32": "float", "f64": "double"}[kernel["dtype"]]
        record = abi.AbiRecord.from_dict(kernel["abi"])
        sig = module.kernels[name].signature
        args = []
        for p in sig.params:
            args.append(f"{name}_{p.name}")
            lines.append(_c_array(c_type, args[-1], inputs[name][p.name]))
        sizes = []
        for r in sig.results:
            rows = {"V": NUM_VERTICES, "E": coo.num_edges, None: 1}[r.domain]
            sizes.append(rows * r.row_elements(dims[name]))
            args.append(f"{name}_res_{r.name}")
            lines.append(f"static {c_type} {args[-1]}[{max(1, sizes[-1])}];")
        dim_values = ", ".join(str(dims[name][d]) for d in record.dims)
        lines += [
            f"static int run_{name}(const gnnc_graph *g, const char *tag)",
            "{",
            f"    gnnc_{name}_plan plan;",
            f"    const int64_t dims[] = {{{dim_values or '0'}}};",
            "    int64_t i;",
            f"    int status = gnnc_{name}_prepare(&plan, g, {THREADS}, {'dims' if dim_values else 'NULL'});",
            "    if (status != GNNC_OK)",
            "        return status;",
            f"    gnnc_{name}_run(&plan, {', '.join(args)});",
        ]
        for r, size in zip(sig.results, sizes):
            lines += [
                f'    printf("%s {name} {r.name} {size}\\n", tag);',
                f"    for (i = 0; i < {size}; i++)",
                f'        printf("%a\\n", (double){name}_res_{r.name}[i]);',
            ]
        lines += [f"    gnnc_{name}_free(&plan);", "    return GNNC_OK;", "}", ""]
        for tag, (_, build) in graphs.items():
            main += [
                f"    if ((status = {build}) != GNNC_OK)",
                "        return 10 + status;",
                f"    if ((status = gnnc_graph_set_relations(&g, NUM_RELATIONS, {tag}_type)) != GNNC_OK)",
                "        return 30 + status;",
                f'    status = run_{name}(&g, "{tag}");',
                "    gnnc_graph_free(&g);",
                "    if (status != GNNC_OK)",
                "        return 20 + status;",
            ]
    main += ["    return 0;", "}", ""]
    return "\n".join(lines + main)


def _parse(output: str) -> dict[tuple[str, str, str], np.ndarray]:
    results, lines = {}, iter(output.splitlines())
    for head in lines:
        tag, kernel, result, count = head.split()
        results[(tag, kernel, result)] = np.array([float.fromhex(next(lines)) for _ in range(int(count))])
    return results


@pytest.mark.skipif(shutil.which(CC) is None, reason=f"no C compiler ({CC})")
@pytest.mark.parametrize("name,schedule", CASES)
def test_c_caller_matches_the_reference(name, schedule, tmp_path):
    module = example_or_skip(name, schedule)
    write_header(module.metadata, tmp_path / "kernels.h")
    sorted_ids = any(k["abi"].get("edges_sorted") for k in module.metadata["kernels"])
    graphs = _graphs(sorted_ids)
    coo = graphs["coo"][0]
    inputs, dims = {}, {}
    for kernel in module.metadata["kernels"]:
        record = abi.AbiRecord.from_dict(kernel["abi"])
        sig = module.kernels[kernel["name"]].signature
        dims[sig.name] = {d: (record.sizes or {}).get(d, DIMS[d]) for d in record.dims}
        inputs[sig.name] = random_inputs(sig, coo, dims[sig.name], sig.numpy_dtype, 7)
    (tmp_path / "main.c").write_text(_program(module, inputs, dims, graphs))
    build = subprocess.run(
        [CC, "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "main.c", str(module.path),
         f"-Wl,-rpath,{Path(module.path).parent}", "-o", "main"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, (run.returncode, run.stderr)
    got = _parse(run.stdout)
    reference = reference_example(name)
    for tag, (graph, _) in graphs.items():
        for sig in (module.kernels[k["name"]].signature for k in module.metadata["kernels"]):
            want = getattr(reference, sig.name)(graph, **inputs[sig.name])
            want = want if isinstance(want, dict) else {sig.results[0].name: want}
            for r in sig.results:
                values = got[(tag, sig.name, r.name)].astype(sig.numpy_dtype).reshape(want[r.name].shape)
                assert_matches(values, want[r.name], graph, sig.numpy_dtype)


@pytest.mark.parametrize("name,schedule", FAST)
def test_header_declares_what_the_object_defines(name, schedule):
    """Each prototype has the parameters of the kernel's LLVM definition, of the same kinds."""
    source = (EXAMPLES / f"{name}.gnn").read_text()
    result = compiler.compile_source(
        source, f"{name}.gnn", compiler.CompileOptions(schedule=schedule), stop_after="llvm"
    )
    header = render_header(result.metadata)
    for kernel in result.metadata["kernels"]:
        symbol = kernel["symbol"]
        defined = re.search(rf'define void @"{symbol}"\((.*)\)', result.stages["translate-to-llvm"]).group(1)
        declared = re.search(rf"void {symbol}\(\n(.*?)\n\);", header, re.S).group(1).splitlines()
        defined_kinds = ["i64" if p.startswith("i64") else "ptr" for p in defined.split(", ")]
        declared_kinds = ["ptr" if "*" in line.split("/*")[0] else "i64" for line in declared]
        assert declared_kinds == defined_kinds


@pytest.mark.skipif(shutil.which(CC) is None, reason=f"no C compiler ({CC})")
def test_parameters_named_like_the_helpers_locals_compile(tmp_path):
    """A kernel's parameters keep their names in `gnnc_K_run`, whose plan is `gnnc__plan`: a
    parameter `p` (GENConv's kernels have one) once gave a header that did not compile. The
    COO entry, declared in the header, is called from C and gives the reference's sums."""
    source = "kernel k(p: f32[V, F], g: f32[V, F]) -> f32[V, F] { out[v] = sum(p[u] * g[u]) }\n"
    module = gnnc.compile(source)
    write_header(module.metadata, tmp_path / "kernels.h")
    (tmp_path / "main.c").write_text(
        "\n".join(
            [
                '#include "kernels.h"',
                "#include <stdio.h>",
                "int main(void)",
                "{",
                "    const int64_t src[] = {0, 1, 2, 2}, dst[] = {1, 2, 0, 1}, dims[] = {2};",
                "    const float p[] = {1, 2, 3, 4, 5, 6}, g[] = {1, 1, 2, 2, 3, 3};",
                "    float out[6];",
                "    void *args[] = {(void *)p, (void *)g, out};",
                "    int i, status = gnnc_k__coo(3, 3, 4, src, dst, 1, dims, args);",
                "    for (i = 0; i < 6; i++)",
                '        printf("%g\\n", out[i]);',
                "    return status;",
                "}",
                "",
            ]
        )
    )
    build = subprocess.run(
        [CC, "-std=c99", "-Wall", "-Wextra", "-Werror", "main.c", str(module.path),
         f"-Wl,-rpath,{Path(module.path).parent}", "-o", "main"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    p = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    g = np.array([[1, 1], [2, 2], [3, 3]], np.float32)
    graph = gnnc.Graph.from_edge_index(np.array([[0, 1, 2, 2], [1, 2, 0, 1]]), num_vertices=3)
    want = gnnc.compile(source, target="reference").k(graph, p=p, g=g)
    got = np.array([float(v) for v in run.stdout.split()], np.float32).reshape(3, 2)
    np.testing.assert_allclose(got, want, rtol=1e-6)
