"""The kernel ABI's description (gnnc/ir/abi.py): the record's JSON and the argument lists."""

from __future__ import annotations

import pytest

from gnnc.ir import abi
from tests.helpers import compiled_example


@pytest.mark.parametrize(
    "name,schedule",
    [
        ("gat", None),
        ("gcn", "specialize F 32; stream outputs"),
        ("mlp_aggr", "group neighbors 3\ntile features 4\nsort degree"),
        ("gcn_norm", "reorder rcm; vectorize 8"),
        ("attention", "order edges hilbert"),
        ("gat", "edges sorted"),
    ],
)
def test_the_record_reads_back_as_written(name, schedule):
    for kernel in compiled_example(name, schedule).metadata["kernels"]:
        record = abi.AbiRecord.from_dict(kernel["abi"])
        assert record.to_dict() == kernel["abi"]
        assert abi.AbiRecord.from_json(record.to_json()) == record


def test_a_grid_record_reads_back_as_written():
    grid = abi.Grid("warp_edge", 256, 2, 32, [abi.Launch("V", 1), abi.Launch("E", 2, [["F"]])], hybrid=4)
    record = abi.AbiRecord(dims=["F"], grid=grid, temps=[abi.Temp("V", ["F"], read_at_src=True)])
    assert abi.AbiRecord.from_json(record.to_json()) == record
    assert "phases" not in record.to_dict()["grid"] and "rows" not in record.to_dict()["temps"][0]


def _names(record: abi.AbiRecord, params=("x",), results=("out",)) -> list[str]:
    return [a.name for a in abi.kernel_arguments(record, list(params), list(results))]


def test_the_fixed_arguments_lead():
    names = _names(abi.AbiRecord(dims=["F"], temps=[abi.Temp("V", ["F"])]))
    assert names == [*abi.GRAPH_ARGUMENTS, "x", "out", "temp0"]


@pytest.mark.parametrize(
    "record,extra",
    [
        (abi.AbiRecord(dims=[], source_sweep=True), ["src_meta", "src_blocks"]),
        (abi.AbiRecord(dims=[], stream=True), ["acc_rows"]),
        (abi.AbiRecord(dims=[], partitions=3), ["acc_rows", "part_indptr", "part_src", "part_eid"]),
        (abi.AbiRecord(dims=[], edge_order="hilbert"), ["hilbert_src", "hilbert_dst", "hilbert_eid"]),
        (
            abi.AbiRecord(dims=[], groups=4),
            ["acc_rows", "group_meta", "group_blocks", "group_dst", "group_bounds", "group_offsets"],
        ),
        (
            abi.AbiRecord(dims=[], grid=abi.Grid("warp_edge", 256, 1, 32, [], hybrid=8, dst_scratch=True)),
            ["dst_scratch", "hybrid_hot", "hybrid_slot"],
        ),
    ],
)
def test_each_group_is_there_when_its_predicate_holds(record, extra):
    assert _names(record) == [*abi.GRAPH_ARGUMENTS, "x", "out", *extra]
    assert [a.name for a in abi.trailing_arguments(record)] == extra


def test_names_stay_unique_and_valid_in_c():
    record = abi.AbiRecord(dims=[], temps=[abi.Temp("V", [])])
    names = _names(record, params=("dims", "int", "temp0"), results=("out",))
    assert names[len(abi.GRAPH_ARGUMENTS) :] == ["dims_", "int_", "temp0", "out", "temp0_"]
    assert len(set(names)) == len(names)


def test_c_types_follow_the_flags():
    by_name = {a.name: a for a in abi.kernel_arguments(abi.AbiRecord(dims=[], stream=True), ["x"], ["out"])}
    assert by_name["num_edges"].c_type("float") == "int64_t"
    assert by_name["in_src"].c_type("float") == "const int64_t *"
    assert by_name["x"].c_type("double") == "const double *"
    assert by_name["out"].c_type("float") == by_name["acc_rows"].c_type("float") == "float *"
