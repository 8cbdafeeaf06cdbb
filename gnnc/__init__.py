"""gnnc: a compiler for graph neural network message-passing kernels."""

__version__ = "0.1.0"
