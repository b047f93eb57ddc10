"""A byte-level BPE tokenizer trained offline with Hugging Face `tokenizers`.

Byte-level means every string encodes (unknown characters fall back to their UTF-8 bytes) and
`decode(encode(s)) == s`. One special token, `<|endoftext|>`, separates documents when they are
packed into fixed-length training sequences (its id is `eot_token_id`). The class satisfies
`evals.protocols.Tokenizer`, so held-out and downstream evals take it as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from monitor.errors import GapwatchError

EOT = "<|endoftext|>"
# 256 byte symbols plus the end-of-text token is the smallest vocabulary that can encode anything.
MIN_VOCAB = 257


class Tokenizer:
    """encode/decode text; `vocab_size` ids in [0, vocab_size); `eot_token_id` ends every document."""

    def __init__(self, hf: HFTokenizer) -> None:
        eot = hf.token_to_id(EOT)
        if eot is None:
            raise GapwatchError(f"tokenizer has no {EOT} token")
        self._hf = hf
        self.eot_token_id: int = eot
        self.vocab_size: int = hf.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self._hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Many texts at once, in parallel in Rust."""
        return [e.ids for e in self._hf.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self._hf.decode([int(i) for i in ids], skip_special_tokens=False)

    def to_json(self) -> str:
        return self._hf.to_str()

    @classmethod
    def from_json(cls, text: str) -> "Tokenizer":
        try:
            return cls(HFTokenizer.from_str(text))
        except Exception as exc:  # tokenizers raises a bare Exception on malformed JSON
            raise GapwatchError(f"tokenizer JSON is malformed: {str(exc).splitlines()[0]}") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "Tokenizer":
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise GapwatchError(f"cannot read tokenizer {path}: {exc.strerror}") from None
        return cls.from_json(text)

    def fingerprint(self) -> str:
        """A short content hash, so caches built with another tokenizer are never reused."""
        import hashlib

        canonical = json.dumps(json.loads(self.to_json()), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Train byte-level BPE on `texts` up to `vocab_size` ids (the eot token included)."""
    if vocab_size < MIN_VOCAB:
        raise GapwatchError(f"tokenizer vocab_size must be at least {MIN_VOCAB}, not {vocab_size}")
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    hf.train_from_iterator(texts, trainer=trainer)
    return Tokenizer(hf)
