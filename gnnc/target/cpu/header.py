"""A C header for the kernels of a shared object, from its metadata record.

Each kernel's prototype is `abi.kernel_arguments` of its record, every
argument with its C type and a comment saying what it holds (and, for an
optional group, why the kernel takes it). After the prototypes come the C
helpers (`c_helpers.py`): a `gnnc_graph` built from COO or CSR arrays, and
per kernel a plan that fills every graph and schedule argument, so a C caller
needs nothing from gnnc's Python sources.
"""

from __future__ import annotations

import re
from pathlib import Path

from gnnc.ir import abi
from gnnc.target.cpu import c_helpers

#: The side a vertex input is read at decides its rows on a bipartite graph.
_ROWS = {
    ("src",): ", num_src rows",
    ("dst",): ", num_dst rows",
    ("src", "dst"): ", num_src rows (destinations first)",
}


def _shape_text(domain: str | None, shape: list) -> str:
    dims = ([domain] if domain else []) + [str(d) for d in shape]
    return "[" + ", ".join(dims) + "]" if dims else "scalar"


def _argument_comments(kernel: dict, record: abi.AbiRecord, arguments: tuple[abi.Argument, ...]) -> list[str]:
    """What each argument holds, in argument order."""
    params = {p["name"]: p for p in kernel["params"]}
    results = {r["name"]: r for r in kernel["results"]}
    by_group = {g.group: g for g in abi.ARGUMENT_GROUPS}
    tensors = iter([*kernel["params"], *kernel["results"]])
    temps = iter(record.temps)
    rows = "V" if record.partitions is not None else "n (group_meta[1])" if record.groups else "num_threads"
    _specific = {
        "dst_blocks": "num_blocks + 1 ascending boundaries of "
        + ("positions in the Hilbert edge list" if record.edge_order else "positions in dst_order"),
        "in_indptr": "V + 1: in-edge offsets by "
        + ("position in dst_order (in_src and in_eid laid out so too)" if record.ordered_edges else "destination"),
        "acc_rows": f"{rows} rows of {record.acc_rows} (summed)"
        if record.acc_rows
        else "not read or written by this kernel (any one-element array)",
    }
    comments = []
    for a in arguments:
        if a.group in (abi.Group.PARAMS, abi.Group.RESULTS):
            tensor = next(tensors)
            rows = _ROWS.get(tuple(tensor.get("sides", ())), "") if tensor["name"] in params else ""
            text = _shape_text(tensor["domain"], tensor["shape"]) + rows
            if a.name != tensor["name"]:
                text += f", {'input' if tensor['name'] in params else 'result'} {tensor['name']}"
            assert tensor["name"] in params or tensor["name"] in results
        elif a.group is abi.Group.TEMPS:
            temp = next(temps)
            pairs = {"RS": "src_pair_meta[0]", "RD": "dst_pair_meta[0]"}
            rows = "num_src" if temp.source_rows else {"V": "num_dst", "E": "num_edges", **pairs}[temp.domain]
            what = "a value per (vertex, relation) pair" if temp.domain in pairs else "a vertex value between phases"
            text = f"{_shape_text(None, temp.shape)} per row, {rows} rows: {what}"
        else:
            text = _specific.get(a.name, a.doc)
        group = by_group[a.group]
        if group.arguments and group.arguments[0] is a and group.when != "always":
            text += f" [{group.when}]"
        comments.append(text)
    return comments


def _prototype(kernel: dict, record: abi.AbiRecord, arguments: tuple[abi.Argument, ...], float_type: str) -> list[str]:
    lines = [f"/* kernel {kernel['name']}: dims = [{', '.join(record.dims)}]"]
    if record.sizes:
        # the native code takes these as constants and does not read them from dims
        fixed = ", ".join(f"{name} = {size}" for name, size in record.sizes.items())
        lines.append(f" *   compiled for {fixed} (specialize): dims must hold exactly these")
    lines.append(f" *   scratch shapes: {record.scratch or 'none'}")
    temps = ", ".join(_shape_text(t.domain, t.shape) for t in record.temps) or "none"
    lines.append(f" *   temp buffers: {temps}")
    if record.order != "identity":
        lines.append(f" *   destinations in {record.order} order: any permutation in dst_order is valid")
    if record.ordered_edges:
        lines.append(" *   in_indptr, in_src and in_eid are laid out by position in dst_order")
    if record.edges_sorted:
        lines.append(" *   edges sorted: edge ids must be the in-CSR positions (edges sorted by destination)")
    if not record.edge_ids:
        lines.append(" *   reads no edge ids: in_eid (and part_eid) may be one-element arrays")
    if not record.in_src:
        lines.append(" *   reads no in_src (its partitions carry the sources): in_src may be a one-element array")
    lines[-1] += " */"
    lines.append(f"void {kernel['symbol']}(")
    comments = _argument_comments(kernel, record, arguments)
    for i, (a, comment) in enumerate(zip(arguments, comments)):
        comma = "," if i + 1 < len(arguments) else ""
        lines.append(f"    {a.c_type(float_type)}{'' if a.pointer else ' '}{a.name}{comma} /* {comment} */")
    lines.append(");")
    lines.append("")
    return lines


def render_header(metadata: dict, guard: str = "GNNC_KERNELS_H") -> str:
    lines = [
        f"/* Generated by gnnc {metadata['gnnc_version']} (ABI {metadata['abi_version']}, "
        f"cpu {metadata['cpu'].get('level', '?')}). Do not edit. */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stdint.h>",
        "#include <stdlib.h>",
        "#include <string.h>",
        "",
        "/* Every array is C-contiguous and row-major, of int64_t or of the kernel's float",
        " * type; no two arrays overlap, and no pointer may be NULL (pass a one-element",
        " * array for an empty one). Vertex tensors have num_dst rows (an input read at",
        " * sources num_src), edge tensors num_edges rows indexed by edge id. Destination",
        " * blocks dst_blocks[b] .. dst_blocks[b + 1] split positions, which dst_order maps",
        " * to destinations; up to num_threads OpenMP workers take blocks dynamically, each",
        " * with its own slice of scratch. The helpers after the prototypes fill all of",
        " * this from a graph (gnnc_K_prepare). */",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
    ]
    helpers = []
    for k in metadata["kernels"]:
        record, arguments, float_type = _kernel_abi(k)
        lines += _prototype(k, record, arguments, float_type)
        if k.get("coo"):
            lines += [
                f"/* {k['name']} in one call on COO edges: gnnc_graph_from_coo, prepare, run, free (the",
                " * helpers below); args: its inputs, then its results, in declaration order. */",
                f"int {c_helpers.coo_prototype(k['coo'])};",
                "",
            ]
        if record.grid is None:  # a cuda emulation's grid is sized by the Python runtime
            helpers.append(c_helpers.kernel_helpers(k, arguments, float_type))
    if helpers:
        lines += [c_helpers.SHARED, *helpers]
    lines += ["#ifdef __cplusplus", "}", "#endif", "", f"#endif /* {guard} */", ""]
    return "\n".join(lines)


def _kernel_abi(kernel: dict) -> tuple[abi.AbiRecord, tuple[abi.Argument, ...], str]:
    """A kernel's (metadata record's) ABI record, arguments and C float type."""
    record = abi.AbiRecord.from_dict(kernel["abi"])
    names = [p["name"] for p in kernel["params"]], [r["name"] for r in kernel["results"]]
    return record, abi.kernel_arguments(record, *names), c_helpers.C_TYPES[kernel["dtype"]]


def coo_entries(metadata: dict) -> str | None:
    """The C the linker compiles into a shared object beside its kernels: the header, then the
    COO entry (`c_helpers.coo_entry`) of each kernel the metadata names one for ("coo"); None
    where no kernel has one."""
    kernels = [k for k in metadata["kernels"] if k.get("coo")]
    if not kernels:
        return None
    entries = [c_helpers.coo_entry(k, *_kernel_abi(k)[1:]) for k in kernels]
    return "\n".join([render_header(metadata, "GNNC_ENTRIES_H"), *entries])


def write_header(metadata: dict, path: Path) -> None:
    guard = "GNNC_" + re.sub(r"[^A-Za-z0-9]", "_", path.stem).upper() + "_H"
    path.write_text(render_header(metadata, guard))
