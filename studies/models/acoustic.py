"""An acoustic-model-like stack of Linear layers, for the README's profile -> plan -> apply example.

Input [batch, frames, 80] log-mel features; output [batch, frames, 5000] scores over output
units (e.g. tied triphone states). Randomly initialised: nothing is downloaded, and a
Linear's time does not depend on its weights.

    cutsearch profile studies/models/acoustic.py:build --input-shape 8,512,80
"""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    """Pre-norm MLP block with a residual connection."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class AcousticModel(nn.Module):
    def __init__(self, features: int = 80, hidden: int = 1024, ffn: int = 4096, blocks: int = 4,
                 units: int = 5000) -> None:
        super().__init__()
        self.input = nn.Linear(features, hidden)
        self.blocks = nn.Sequential(*(Block(hidden, ffn) for _ in range(blocks)))
        self.norm = nn.LayerNorm(hidden)
        self.output = nn.Linear(hidden, units)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.norm(self.blocks(self.input(x))))


def build(**sizes: int) -> AcousticModel:
    return AcousticModel(**sizes)
