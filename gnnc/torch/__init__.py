"""PyTorch integration (`pip install gnnc[torch]`): compiled kernels as custom ops with autograd.

    conv = gnnc.torch.kernel("examples/gcn.gnn", "gcn")
    out = conv(edge_index, x, w)     # edge_index: a 2 x E tensor, or a gnnc.Graph
    out = conv(edge_index, x=x, w=w, size=(num_src, num_dst))   # a bipartite block, as PyG's size=
    out.sum().backward()             # gradient kernels, generated and compiled on first use

Every kernel and its gradient are `torch.library` ops in the `gnnc`
namespace (`ops.py`), with fake implementations and autograd registered, so
torch.compile (fullgraph), torch.export and jit.trace record them. Tensors
cross into the kernels without copies (non-contiguous ones are made
contiguous first); float64 inputs run an f64 variant, so gradcheck works.
An edge_index tensor is turned into a `gnnc.Graph` once and cached until it
is edited in place (`graphs.py`). The thread count follows
`torch.get_num_threads()` unless `threads=` is given (capped at a rank's
share of the cores under torchrun: `threads.py`). A kernel object
pickles as its source, name and options (`kernels.py`). CUDA tensors run
the same ops' CUDA implementation: the kernel's PTX through gnnc's CUDA
runtime, on torch's current stream, the tensors borrowed (`cuda.py`).
"""

from gnnc.torch.graphs import as_graph
from gnnc.torch.kernels import Kernel, kernel

__all__ = ["Kernel", "as_graph", "kernel"]
