"""Sentences that were true once and are not now (issue 31's list): none left in the docs, the
configs or the messages rlcore prints."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STALE = (
    "is refused until it is built",  # the Megatron backend is built
    "no component has tensor parallelism",  # sglang engines and Megatron are tensor parallel
    "which no built engine has",  # the sglang engine has tensor parallelism
)


def test_no_stale_sentence_is_left():
    files = [
        *REPO.glob("*.md"),
        *(REPO / "docs").rglob("*.md"),
        *(REPO / "configs").rglob("*.yaml"),
        *(REPO / "rlcore").rglob("*.py"),
        *(REPO / "examples").rglob("*.py"),
    ]
    assert len(files) > 100
    found = [
        f"{path.relative_to(REPO)}: {phrase}"
        for path in files
        for phrase in STALE
        if phrase in " ".join(path.read_text().split())  # (a sentence across lines too)
    ]
    assert not found, found
