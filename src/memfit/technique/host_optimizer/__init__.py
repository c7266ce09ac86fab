"""The optimizer's states and its step on the host, for one GPU (``host_optimizer``), as
ZeRO-Offload does: the GPU keeps the parameters and, until ``step()``, the gradients; the
host keeps a pinned copy of each, the optimizer's states, and runs the step
(:mod:`._stepping`).

It trades a step's time for memory: every step copies the gradients to the host and the
parameters back (two parameters' worth over PCIe), and the host's cores run the optimizer.
"""

from memfit.technique.host_optimizer._technique import TECHNIQUE, HostOptimizer

__all__ = ["TECHNIQUE", "HostOptimizer"]
