"""`cutsearch.torch.Linear`: an exported layer as a drop-in torch.nn.Module."""

from __future__ import annotations

from pathlib import Path

import torch

from cutsearch.errors import UserError
from cutsearch.loader import load

_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


class Linear(torch.nn.Module):
    """Same outputs as the nn.Linear it replaces (within fp16/bf16 tolerance), faster where the
    search won. Leading dimensions are flattened into M, as nn.Linear does. For inference: no
    gradient flows through it. Its weights are laid out once, when it is made; after changing
    them in place, call `self.fc.prepare(self.weight, self.bias)`."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, export: str | Path, *,
                 any_m: bool = False) -> None:
        super().__init__()
        device = weight.device.index if weight.is_cuda else torch.cuda.current_device()
        self.fc = load(export, device=device, any_m=any_m)
        layer = self.fc.meta["layer"]
        if self.fc.activation != "none":
            raise UserError(f"export {export} fuses {self.fc.activation}: it replaces Linear+activation, not Linear")
        want = (layer["N"], layer["K"])
        if tuple(weight.shape) != want:
            raise UserError(f"Linear has weight {list(weight.shape)}, export {export} is for {list(want)}")
        dtype = _DTYPES[layer["dtype"]]
        self.weight = torch.nn.Parameter(weight.detach().to(device=f"cuda:{device}", dtype=dtype), requires_grad=False)
        self.bias = None if bias is None else torch.nn.Parameter(
            bias.detach().to(device=f"cuda:{device}", dtype=dtype), requires_grad=False)
        self.in_features, self.out_features = layer["K"], layer["N"]
        self.fc.prepare(self.weight, self.bias)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, export: str | Path, *, any_m: bool = False) -> Linear:
        return cls(linear.weight, linear.bias, export, any_m=any_m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        y = self.fc(x.reshape(-1, x.shape[-1]).contiguous())
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, backend={self.fc.backend}"
