"""How often an aligned K cuts into few split-K slices, and what the cost model predicts for
padding it to split-K's pitch (no GPU; every time printed is a prediction).

  python3 studies/scripts/pitched_k.py [--draws 4000] [--seed 7] [LAYERS.toml]

For each distribution of random_layers.py: the draws where split-K pays, and those of them whose
K is aligned and cuts into four 16-byte slices or fewer. Then, for each layer of the file
(default studies/unseen-pitched-k.toml), the model's best config that copies x to split-K's
pitch against its best that keeps x.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import random_layers  # noqa: E402

from cutsearch import model  # noqa: E402
from cutsearch.problem import BYTES, Layer, load_layers  # noqa: E402
from cutsearch.space import Space, k_slices, kernel_problem, split_k_pays  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layers", nargs="?", default="studies/unseen-pitched-k.toml")
    parser.add_argument("--draws", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    for widths in ("drawn", "models", "heads"):
        rng = random.Random(args.seed)
        pays = few = 0
        for _ in range(args.draws):
            d = random_layers.draw(rng, widths)
            layer = Layer(m=d["M"], n=d["N"], k=d["K"], dtype=d["dtype"])
            vec = 16 // BYTES[layer.dtype]
            if split_k_pays(layer):
                pays += 1
                few += layer.k % vec == 0 and k_slices(layer.k, vec) <= 4
        print(f"{widths}: {args.draws} draws, split-K pays in {pays}, an aligned K of at most 4 slices in {few}")
    for name, layer in load_layers(Path(args.layers)).items():
        ranked = model.rank(layer, list(Space(layer)))
        kept = [us for us, c in ranked if kernel_problem(layer, c).pad_k == layer.k]
        pitched = [us for us, c in ranked if kernel_problem(layer, c).pad_k != layer.k]
        best = lambda times: f"{min(times):.1f} µs" if times else "-"  # noqa: E731
        print(f"{name} {layer.m}x{layer.n}x{layer.k}: predicted best pitched {best(pitched)}, keeping x {best(kept)}")


if __name__ == "__main__":
    main()
