"""Feature and recommendation models of the zoo: a plain MLP and neural collaborative filtering."""

from __future__ import annotations

from itertools import pairwise

import torch
from torch import nn


class MLP(nn.Module):
    """``depth`` Linear layers (the output layer included) with ReLU between them."""

    def __init__(self, *, in_features: int, width: int, depth: int, num_classes: int) -> None:
        super().__init__()
        dims = [in_features] + [width] * (depth - 1) + [num_classes]
        layers: list[nn.Module] = []
        for a, b in pairwise(dims):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.layers = nn.Sequential(*layers[:-1])  # no ReLU on the logits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.layers(x)
        return out


class NeuMF(nn.Module):
    """NeuMF: a GMF branch (elementwise product of user and item embeddings) and an MLP tower
    over concatenated embeddings, fused by a Linear head.

    Input: ``(N, 2)`` integer pairs ``(user, item)``. Output: two logits per pair (not interacted,
    interacted), so that cross-entropy trains it; softmax over two logits is the paper's sigmoid
    of their difference.
    """

    def __init__(self, *, users: int, items: int, factors: int, mlp_layers: int) -> None:
        super().__init__()
        mlp_embed = factors * 2 ** (mlp_layers - 1)
        self.gmf_user = nn.Embedding(users, factors)
        self.gmf_item = nn.Embedding(items, factors)
        self.mlp_user = nn.Embedding(users, mlp_embed)
        self.mlp_item = nn.Embedding(items, mlp_embed)
        widths = [2 * mlp_embed // 2**i for i in range(mlp_layers + 1)]  # halves down to factors
        tower: list[nn.Module] = []
        for a, b in pairwise(widths):
            tower += [nn.Linear(a, b), nn.ReLU()]
        self.tower = nn.Sequential(*tower)
        self.head = nn.Linear(2 * factors, 2)
        for emb in (self.gmf_user, self.gmf_item, self.mlp_user, self.mlp_item):
            nn.init.normal_(emb.weight, 0.0, 0.01)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        user, item = pairs[:, 0], pairs[:, 1]
        gmf = self.gmf_user(user) * self.gmf_item(item)
        mlp = self.tower(torch.cat([self.mlp_user(user), self.mlp_item(item)], dim=1))
        out: torch.Tensor = self.head(torch.cat([gmf, mlp], dim=1))
        return out
