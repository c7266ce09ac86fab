"""A graph attention network (GAT) for node classification, as user code:
``graph_attention.py:make_model``.

Multi-head attention over each node's in-edges written without a graph library: the per-node
attention terms gathered onto the edges by indexing, LeakyReLU, a softmax over each node's
edges (the per-node maximum by ``scatter_reduce`` with ``amax`` on detached scores, ``exp``,
the per-node sums by ``index_add``), dropout on the attention, messages weighted per head and
summed into their destination by ``index_add_``; self-loops added by ``torch.cat``, ELU
between layers, heads concatenated then averaged in the last layer. A batch of ``batch_size``
graphs of 1,000 nodes and 16,000 edges each.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

NODES_PER_GRAPH = 1000
EDGES_PER_NODE = 16
FEATURES = 128
CLASSES = 40


class GATLayer(nn.Module):
    def __init__(self, cin: int, cout: int, heads: int, concat: bool = True) -> None:
        super().__init__()
        self.heads, self.cout, self.concat = heads, cout, concat
        self.proj = nn.Linear(cin, heads * cout, bias=False)
        self.att_src = nn.Parameter(torch.randn(1, heads, cout) * cout**-0.5)
        self.att_dst = nn.Parameter(torch.randn(1, heads, cout) * cout**-0.5)
        self.bias = nn.Parameter(torch.zeros(heads * cout if concat else cout))
        self.drop = nn.Dropout(0.2)

    def forward(self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        h = self.proj(x).view(n, self.heads, self.cout)
        a_src = (h * self.att_src).sum(-1)  # (N, H)
        a_dst = (h * self.att_dst).sum(-1)
        scores = F.leaky_relu(a_src[src] + a_dst[dst], 0.2)  # (E, H)
        index = dst[:, None].expand_as(scores)
        peak = torch.full_like(a_dst, float("-inf")).scatter_reduce(
            0, index, scores.detach(), reduce="amax", include_self=True
        )
        weights = torch.exp(scores - peak[dst])
        total = torch.zeros_like(a_dst).index_add(0, dst, weights)
        alpha = self.drop(weights / (total[dst] + 1e-16))
        messages = h[src] * alpha[..., None]  # (E, H, C)
        out = torch.zeros_like(h).index_add_(0, dst, messages)
        out = out.flatten(1) if self.concat else out.mean(1)
        return out + self.bias


class GAT(nn.Module):
    def __init__(self, hidden: int = 64, heads: int = 8, layers: int = 3) -> None:
        super().__init__()
        dims = [FEATURES] + [hidden * heads] * (layers - 1)
        self.layers = nn.ModuleList(
            [GATLayer(d, hidden, heads) for d in dims[:-1]]
            + [GATLayer(dims[-1], CLASSES, heads, concat=False)]
        )
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        loops = torch.arange(x.shape[0], device=x.device)
        src = torch.cat([edges[0], loops])
        dst = torch.cat([edges[1], loops])
        for i, layer in enumerate(self.layers):
            x = layer(self.drop(x), src, dst)
            if i < len(self.layers) - 1:
                x = F.elu(x)
        return x


def make_model() -> nn.Module:
    return GAT()


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    nodes = batch_size * NODES_PER_GRAPH
    edges = nodes * EDGES_PER_NODE
    graph = torch.arange(edges) // (NODES_PER_GRAPH * EDGES_PER_NODE)  # edges stay in a graph
    src = graph * NODES_PER_GRAPH + torch.randint(0, NODES_PER_GRAPH, (edges,))
    dst = graph * NODES_PER_GRAPH + torch.randint(0, NODES_PER_GRAPH, (edges,))
    return {
        "x": torch.randn(nodes, FEATURES),
        "edges": torch.stack([src, dst]),
        "y": torch.randint(0, CLASSES, (nodes,)),
    }


def loss_fn(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(model(batch["x"], batch["edges"]), batch["y"])
