"""Draw fully-connected layers at random, from a distribution fixed before any draw, as a TOML
file that `cutsearch search` and h200x2-unseen.sh read. The draws are not chosen by hand, so a
round over them shows how cutsearch does on shapes nobody picked.

  python3 studies/scripts/random_layers.py --seed SEED --count N > studies/unseen-random.toml

The distribution:
- M log-uniform over [1, 8192] (decode steps up to large batches);
- N and K log-uniform over [64, 16384], each rounded to a multiple of 64 with probability 1/2
  (a model's width) and kept as drawn otherwise;
- dtype f16 or bf16, a bias with probability 3/4 (nn.Linear's default), and none, ReLU, GELU or
  SiLU with equal probability;
- a draw with 2MNK above 1e12 (about 1.3 ms on an H200) is drawn again, to bound device time.
"""

from __future__ import annotations

import argparse
import math
import random

MAX_FLOP = 1e12


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return min(high, max(low, round(math.exp(rng.uniform(math.log(low), math.log(high))))))


def _width(rng: random.Random) -> int:
    value = _log_uniform(rng, 64, 16384)
    return max(64, round(value / 64) * 64) if rng.random() < 0.5 else value


def draw(rng: random.Random) -> dict:
    while True:
        layer = {"M": _log_uniform(rng, 1, 8192), "N": _width(rng), "K": _width(rng),
                 "dtype": rng.choice(["f16", "bf16"]), "bias": rng.random() < 0.75,
                 "activation": rng.choice(["none", "relu", "gelu", "silu"])}
        if 2 * layer["M"] * layer["N"] * layer["K"] <= MAX_FLOP:
            return layer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, default=6)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"# {args.count} layers drawn by studies/scripts/random_layers.py --seed {args.seed} --count {args.count}")
    print("# (the distribution is in that script's docstring; no draw was changed or dropped)")
    for i in range(args.count):
        layer = draw(rng)
        print(f"\n[random{i}]")
        for key in ("M", "N", "K"):
            print(f"{key} = {layer[key]}")
        print(f'dtypes = ["{layer["dtype"]}"]')
        print(f"bias = {str(layer['bias']).lower()}")
        print(f'activation = "{layer["activation"]}"')


if __name__ == "__main__":
    main()
