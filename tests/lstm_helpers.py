"""Helpers shared by the structured-dropout LSTM tests."""

from __future__ import annotations


def tiny_texts(lines: int = 60) -> dict[str, str]:
    """A learnable toy language: each line counts up from a start word, modulo 6."""
    words = ["zero", "one", "two", "three", "four", "five"]

    def text(offset: int, n: int) -> str:
        return "\n".join(
            " " + " ".join(words[(i + offset + k) % 6] for k in range(5)) + " " for i in range(n)
        )

    return {"train": text(0, lines), "valid": text(1, 12), "test": text(2, 12)}
