"""Corpus sources, the held-out split, the tokenizer and the packed-records cache."""

import gzip
import json

import numpy as np
import pytest

from monitor.errors import GapwatchError
from trainer import corpus, packing
from trainer.tokenizer import Tokenizer, train_tokenizer

TEXT = "The quick brown fox jumps over the lazy dog.\n\nPack my box with five dozen liquor jugs.\n"


def test_txt_and_jsonl_documents(tmp_path):
    (tmp_path / "a.txt").write_text(TEXT * 2)
    rows = [{"text": f"document {i} " * 20, "id": f"d{i}"} for i in range(5)]
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    docs = list(corpus.read_documents((str(tmp_path),)))
    # Blank lines separate the .txt file's documents: "fox", "jugs + fox", "jugs".
    assert [d.id for d in docs[:3]] == ["a.txt#0", "a.txt#1", "a.txt#2"]
    assert docs[1].text.startswith("Pack my box") and docs[1].text.endswith("lazy dog.")
    assert docs[3].id == "b.jsonl.gz:d0" and docs[3].text == rows[0]["text"]
    assert len(docs) == 8


def test_stdlib_is_the_default_corpus_cut_into_top_level_blocks():
    docs = list(corpus.read_documents((corpus.STDLIB,)))
    assert all(d.id.startswith("stdlib/") and ".py#" in d.id for d in docs)
    assert not any("/test/" in d.id or "site-packages" in d.id for d in docs)
    argparse_blocks = [d.text for d in docs if d.id.startswith("stdlib/argparse.py#")]
    assert argparse_blocks[0].lstrip().startswith("#")  # the module header comes first
    assert any(b.startswith("class ArgumentParser(") for b in argparse_blocks)
    assert "".join(argparse_blocks) == (corpus._stdlib_root() / "argparse.py").read_text()


def test_stdlib_docstrings_are_the_cleaned_docstrings_of_modules_classes_and_functions():
    import argparse
    import inspect

    docs = list(corpus.read_documents((corpus.STDLIB_DOCSTRINGS,)))
    assert all(d.id.startswith("stdlib-docstrings/") and len(d.text) >= corpus.MIN_DOCSTRING_CHARS for d in docs)
    assert not any("def " in d.text[:4] for d in docs)  # prose, not code
    texts = {d.text for d in docs if d.id.startswith("stdlib-docstrings/argparse.py#")}
    assert inspect.getdoc(argparse) in texts and inspect.getdoc(argparse.ArgumentParser) in texts
    assert corpus.source_signature((corpus.STDLIB_DOCSTRINGS,))[0][0] == corpus.STDLIB_DOCSTRINGS


def test_hf_dataset_source_reads_a_local_dataset_folder(tmp_path):
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(4)))
    docs = list(corpus.read_documents((f"hf:{folder}@train",), max_hf_documents=3))
    assert [d.text for d in docs] == ["row 0", "row 1", "row 2"]
    assert corpus.parse_hf_source("hf:allenai/c4:en@validation") == ("allenai/c4", "en", "validation")


def test_bad_corpus_input_is_one_clear_error(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"text": \n')
    with pytest.raises(GapwatchError, match="line 2: malformed JSON"):
        list(corpus.read_documents((str(bad),)))
    (tmp_path / "no_field.jsonl").write_text('{"body": "x"}\n')
    with pytest.raises(GapwatchError, match="no string field 'text'"):
        list(corpus.read_documents((str(tmp_path / "no_field.jsonl"),)))
    with pytest.raises(GapwatchError, match="neither"):
        list(corpus.read_documents((str(tmp_path / "missing.txt"),)))


def test_heldout_split_is_stable_and_disjoint():
    ids = [f"doc-{i}" for i in range(4000)]
    held = {i for i in ids if corpus.is_heldout(i, 0.05)}
    assert 150 < len(held) < 250
    assert held == {i for i in reversed(ids) if corpus.is_heldout(i, 0.05)}


def test_tokenizer_round_trips_any_text_and_serialises():
    tok = train_tokenizer([TEXT * 50], vocab_size=300)
    text = "naïve café ☃ — tabs\tand\nnewlines"
    assert tok.decode(tok.encode(text)) == text
    assert tok.vocab_size <= 300 and tok.decode([tok.eot_token_id]) == "<|endoftext|>"
    again = Tokenizer.from_json(tok.to_json())
    assert again.encode(text) == tok.encode(text) and again.fingerprint() == tok.fingerprint()
    with pytest.raises(GapwatchError, match="malformed"):
        Tokenizer.from_json("{not json")


def test_packing_splits_caches_and_reuses_a_given_tokenizer(tmp_path):
    src = tmp_path / "corpus.jsonl"
    src.write_text("".join(json.dumps({"text": f"line {i} " + TEXT, "id": i}) + "\n" for i in range(300)))
    spec = packing.CorpusSpec(sources=(str(src),), heldout_fraction=0.1)
    lines = []
    first = packing.build(spec, seq_len=16, vocab_size=300, cache_dir=tmp_path / "c", say=lines.append)
    assert first.train.shape[1] == 17 and first.train.dtype == np.int32
    heldout_ids = {str(i) for i in range(300) if corpus.is_heldout(f"corpus.jsonl:{i}", 0.1)}
    assert len(first.heldout) == len(heldout_ids) > 0
    train_text = first.tokenizer.decode(first.train.ravel())
    assert not any(f"line {i} " in train_text for i in heldout_ids)  # held-out text never trains
    assert any("training records" in line for line in lines)
    lines.clear()
    second = packing.build(spec, seq_len=16, vocab_size=300, cache_dir=tmp_path / "c", say=lines.append)
    assert lines == [] and second.key == first.key  # from the cache, nothing rebuilt
    resumed = packing.build(spec, seq_len=16, vocab_size=300, tokenizer=first.tokenizer,
                            cache_dir=tmp_path / "c", say=lines.append)
    assert resumed.key == first.key and np.array_equal(resumed.train, first.train)
