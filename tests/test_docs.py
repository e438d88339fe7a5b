"""The project's Markdown links resolve: every relative link names a file of the checkout, and
every #anchor a heading of the file it points into (GitHub's heading slugs)."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")  # links and images
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "studies").rglob("*.md"))]


def slug(heading: str) -> str:
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {slug(m) for m in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M)}


def links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text())
    return LINK.findall(text)


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(doc):
    broken = []
    for target in links(doc):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists() or (ROOT not in path.parents and path != ROOT):
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_slugs_follow_github():
    assert slug("What the space can reach, and what physics allows") == \
        "what-the-space-can-reach-and-what-physics-allows"
    assert slug("Worked example (measured on one H200)") == "worked-example-measured-on-one-h200"
    assert slug("`cutsearch.load` and the C ABI") == "cutsearchload-and-the-c-abi"
