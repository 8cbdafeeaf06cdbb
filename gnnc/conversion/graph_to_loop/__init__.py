"""The lowering behind convert-graph-to-loop, apart from its pass.

Each graph-dialect kernel becomes one `func.func` with the gnnc C ABI
(`gnnc/ir/abi.py`). The modules follow the lowering's walk:

- `analysis`: what a destination computes (reductions by level, sinks), found
  before anything is emitted;
- `schedule`: the kernel's schedule as the lowering reads it;
- `emitter`, `builder`: ops into blocks, sizes, offsets and feature nests;
- `values`: one element of a graph value; dots and matvecs into scratch;
- `edges`: walks over a destination's in-edges;
- `destination`: one destination's levels of walks and its vertex results;
- `phases`: the sweeps (phases, the source sweep, neighbour group sweeps);
- `kernel`: `KernelLowering`, which builds the function from all of them.
"""

from gnnc.conversion.graph_to_loop.kernel import KernelLowering

__all__ = ["KernelLowering"]
