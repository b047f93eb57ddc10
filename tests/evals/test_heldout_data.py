"""Held-out loaders: text, JSON lines, a Hugging Face dataset (read locally, and the hub offline)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

from evals.data_convert import lambada_passages
from evals.data_layout import LAMBADA_FILE, write_jsonl
from evals.heldout_data import default_heldout_set, load_hf_dataset, load_jsonl, load_text_file
from monitor.errors import GapwatchError

# The `configs` block of allenai/c4's dataset card: the hub resolves "en"/"validation" through it.
C4_CARD = """---
configs:
- config_name: en
  data_files:
  - split: train
    path: en/c4-train.*.json.gz
  - split: validation
    path: en/c4-validation.*.json.gz
---
"""


def test_text_and_jsonl(shared_data):
    wiki = load_text_file(shared_data / "text/wikitext-2/valid.txt")
    assert wiki.name == "valid" and len(wiki.documents) == 1 and "Homarus gammarus" in wiki.documents[0]
    lam = load_jsonl(shared_data / "text/lambada/lambada_test.jsonl", name="lambada")
    assert len(lam.documents) == 5153


def test_jsonl_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": \n')
    with pytest.raises(GapwatchError, match=r"bad.jsonl:2: not JSON"):
        load_jsonl(bad)
    bad.write_text('{"body": "x"}\n')
    with pytest.raises(GapwatchError, match=r"bad.jsonl:1: no 'text' field"):
        load_jsonl(bad)
    with pytest.raises(GapwatchError, match="no such file"):
        load_text_file(tmp_path / "missing.txt")


def test_hf_dataset_reads_a_c4_layout_through_its_config(tmp_path, shared_data):
    docs = []
    for path in sorted((shared_data / "text/dolma-cc-en").glob("*.jsonl")):
        docs += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    repo = tmp_path / "c4"
    (repo / "en").mkdir(parents=True)
    (repo / "README.md").write_text(C4_CARD)
    with gzip.open(repo / "en/c4-validation.00000-of-00001.json.gz", "wt") as fh:
        for doc in docs:
            fh.write(json.dumps({"text": doc["text"], "url": doc["metadata"].get("url", "")}) + "\n")
    with gzip.open(repo / "en/c4-train.00000-of-00001.json.gz", "wt") as fh:
        fh.write(json.dumps({"text": "training text must not appear", "url": ""}) + "\n")
    heldout = load_hf_dataset(str(repo), "en", split="validation", max_documents=5, name="c4_en")
    assert heldout.documents == [d["text"] for d in docs[:5]]


def test_hf_hub_unreachable_is_one_clear_error(tmp_path):
    code = ("from evals.heldout_data import load_hf_dataset\n"
            "from monitor.errors import GapwatchError\n"
            "try:\n    load_hf_dataset('allenai/c4', 'en', max_documents=2)\n"
            "except GapwatchError as e:\n    print('ERR', e)\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    lines = [line for line in out.stdout.splitlines() if line.startswith("ERR")]
    assert len(lines) == 1, out.stdout + out.stderr
    assert "allenai/c4/en [validation]: cannot be read" in lines[0]


def test_default_set_comes_from_the_fetched_cache(tmp_path, shared_data):
    with pytest.raises(GapwatchError, match="gapwatch evals fetch-data"):
        default_heldout_set(tmp_path)
    raw = (shared_data / "text/lambada/requests.jsonl.gz").read_bytes()
    write_jsonl(tmp_path / LAMBADA_FILE, lambada_passages(raw, "requests"))
    heldout = default_heldout_set(tmp_path, max_documents=10)
    expected = load_jsonl(shared_data / "text/lambada/lambada_test.jsonl", max_documents=10)
    assert heldout.name == "lambada" and heldout.documents == expected.documents
