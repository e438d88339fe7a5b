"""Draw fully-connected layers at random, from a distribution fixed before any draw, as a TOML
file that `cutsearch search` and h200x2-unseen.sh read. The draws are not chosen by hand, so a
round over them shows how cutsearch does on shapes nobody picked.

  python3 studies/scripts/random_layers.py --seed SEED --count N > studies/unseen-random.toml
  python3 studies/scripts/random_layers.py --widths models --seed SEED --count N > ...
  python3 studies/scripts/random_layers.py --widths heads --seed SEED --count N > ...

The distribution (`--widths drawn`, the default):
- M log-uniform over [1, 8192] (decode steps up to large batches);
- N and K log-uniform over [64, 16384], each rounded to a multiple of 64 with probability 1/2
  (a model's width) and kept as drawn otherwise;
- dtype f16 or bf16, a bias with probability 3/4 (nn.Linear's default), and none, ReLU, GELU or
  SiLU with equal probability;
- a draw with 2MNK above 1e12 (about 1.3 ms on an H200) is drawn again, to bound device time.

With `--widths models`, N is drawn uniformly from the published model widths and vocabulary
sizes below, and K from the widths alone (a vocabulary is an output); the rest is as above.

With `--widths heads`, a tiny output over a long K (a classifier, value or probe head): M
log-uniform over [1, 512], N over [1, 64] and K over [1024, 131072], K rounded to a multiple of 64
with probability 1/2; the rest is as above.
"""

from __future__ import annotations

import argparse
import math
import random

MAX_FLOP = 1e12
# Hidden and MLP widths of published transformer, speech and vision models (BERT, GPT-2,
# Whisper, ViT, LLaMA 1-3, Mistral, Qwen2), and their vocabularies.
MODEL_WIDTHS = (384, 512, 768, 1024, 1280, 1536, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 8192,
                11008, 13824, 14336, 18944)
VOCABULARIES = (30522, 32000, 32128, 50257, 51865, 128256, 151936)


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return min(high, max(low, round(math.exp(rng.uniform(math.log(low), math.log(high))))))


def _width(rng: random.Random) -> int:
    value = _log_uniform(rng, 64, 16384)
    return max(64, round(value / 64) * 64) if rng.random() < 0.5 else value


def draw(rng: random.Random, widths: str = "drawn") -> dict:
    while True:
        m = _log_uniform(rng, 1, 8192)  # first, so that earlier seeds draw what they drew
        if widths == "heads":
            m, n = _log_uniform(rng, 1, 512), _log_uniform(rng, 1, 64)
            k = _log_uniform(rng, 1024, 131072)
            k = round(k / 64) * 64 if rng.random() < 0.5 else k
        elif widths == "models":
            n, k = rng.choice(MODEL_WIDTHS + VOCABULARIES), rng.choice(MODEL_WIDTHS)
        else:
            n, k = _width(rng), _width(rng)
        layer = {"M": m, "N": n, "K": k,
                 "dtype": rng.choice(["f16", "bf16"]), "bias": rng.random() < 0.75,
                 "activation": rng.choice(["none", "relu", "gelu", "silu"])}
        if 2 * layer["M"] * layer["N"] * layer["K"] <= MAX_FLOP:
            return layer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, default=6)
    parser.add_argument("--widths", choices=("drawn", "models", "heads"), default="drawn")
    parser.add_argument("--prefix", default="random")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    flags = f"--widths {args.widths} " if args.widths != "drawn" else ""
    print(f"# {args.count} layers drawn by studies/scripts/random_layers.py {flags}--seed {args.seed} --count {args.count}")
    print("# (the distribution is in that script's docstring; no draw was changed or dropped)")
    for i in range(args.count):
        layer = draw(rng, args.widths)
        print(f"\n[{args.prefix}{i}]")
        for key in ("M", "N", "K"):
            print(f"{key} = {layer[key]}")
        print(f'dtypes = ["{layer["dtype"]}"]')
        print(f"bias = {str(layer['bias']).lower()}")
        print(f'activation = "{layer["activation"]}"')


if __name__ == "__main__":
    main()
