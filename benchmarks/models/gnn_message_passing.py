"""A message-passing graph network, as user code: ``gnn_message_passing.py:make_model``.

Messages are gathered from source nodes (``index_select``), summed into destination nodes
(``index_add``) and normalised by the in-degree (``bincount`` of a real batch tensor); a
batch of ``batch_size`` graphs of 1,000 nodes and 10,000 edges each, node classification.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

NODES_PER_GRAPH = 1000
EDGES_PER_NODE = 10
FEATURES = 64
CLASSES = 16


class MessagePassing(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.message = nn.Linear(2 * dim, dim)
        self.update = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, deg: torch.Tensor):
        m = F.relu(self.message(torch.cat([x.index_select(0, src), x.index_select(0, dst)], -1)))
        agg = torch.zeros_like(x).index_add_(0, dst, m) / deg.clamp(min=1).unsqueeze(-1)
        return self.norm(x + self.update(torch.cat([x, agg], -1)))


class GNN(nn.Module):
    def __init__(self, dim: int = 256, layers: int = 4) -> None:
        super().__init__()
        self.embed = nn.Linear(FEATURES, dim)
        self.layers = nn.ModuleList(MessagePassing(dim) for _ in range(layers))
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        src, dst = edges[0], edges[1]
        deg = torch.bincount(dst, minlength=x.shape[0]).to(x.dtype)
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h, src, dst, deg)
        return self.head(h)


def make_model() -> nn.Module:
    return GNN()


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
