"""Tokenizers that satisfy `evals.protocols.Tokenizer`."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from monitor.errors import GapwatchError


class ByteTokenizer:
    """UTF-8 bytes as token ids 0..255, and 256 as end of text: lossless, needs no vocabulary file."""

    vocab_size = 257
    eot_token_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        # A window cut inside a multi-byte character must still decode, hence "replace".
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    """A Hugging Face `tokenizers.Tokenizer` (a tokenizer.json file) with a named end-of-text token."""

    def __init__(self, tokenizer, eot_token: str) -> None:
        eot = tokenizer.token_to_id(eot_token)
        if eot is None:
            raise GapwatchError(f"tokenizer has no end-of-text token {eot_token!r}")
        self._tok = tokenizer
        self.eot_token_id = int(eot)
        self.vocab_size = int(tokenizer.get_vocab_size(with_added_tokens=True))

    @classmethod
    def from_file(cls, path: str | Path, eot_token: str = "<|endoftext|>") -> "HFTokenizer":
        from tokenizers import Tokenizer

        try:
            return cls(Tokenizer.from_file(str(path)), eot_token)
        except Exception as exc:  # tokenizers raises a bare Exception on a missing or bad file
            if isinstance(exc, GapwatchError):
                raise
            raise GapwatchError(f"{path}: not a readable tokenizer.json ({exc})") from None

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)
