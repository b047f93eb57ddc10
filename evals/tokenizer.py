"""The byte tokenizer: `evals.protocols.Tokenizer` with no vocabulary file (trainer/tokenizer.py has
the trained BPE one)."""

from __future__ import annotations

from typing import Sequence


class ByteTokenizer:
    """UTF-8 bytes as token ids 0..255, and 256 as end of text: lossless, needs no vocabulary file."""

    vocab_size = 257
    eot_token_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        # A window cut inside a multi-byte character must still decode, hence "replace".
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

