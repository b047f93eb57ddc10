"""`gapwatch parity`: logit parity of our JAX model against Hugging Face, or of two checkpoints.

    gapwatch parity --against hf [--dtype float32|bfloat16] [--json]
        A small random OLMo 3 model in transformers (`Olmo3ForCausalLM`), its weights converted to
        ours (trainer/convert_hf.py), both run on the same real text at full context. In float32
        the two must agree to KL < 1e-6 and top-1 >= 99.9% (exit status 1 otherwise); in bfloat16
        ours is printed beside what the OLMo 3 reproduction measured between its frameworks.
    gapwatch parity CHECKPOINT_A CHECKPOINT_B [--run NAME --store URL]
        Two checkpoints (two runs at equal tokens, or one run before and after a change) on the
        same text; with --run, stored as parity/kl_mean and parity/top1 at checkpoint A's step.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from monitor.errors import GapwatchError

from app.extras import require_extra
from app.options import add_store_argument


@dataclass(frozen=True)
class HFParitySetup:
    """The model and text of `--against hf`: OLMo 3's shape, small enough for a CPU in seconds."""

    vocab_size: int = 512
    """At least the byte tokenizer's 257 ids; padded like real vocabularies."""
    d_model: int = 128
    """Width of the residual stream."""
    n_layers: int = 4
    """Four layers: three sliding-window and one full-attention, OLMo 3's pattern."""
    n_heads: int = 4
    """Query heads per layer."""
    n_kv_heads: int = 2
    """Fewer key/value heads than query heads: grouped-query attention is exercised."""
    head_dim: int = 32
    """Width of one attention head."""
    mlp_hidden: int = 384
    """Hidden width of the SwiGLU MLP."""
    seq_len: int = 2048
    """The model's full context: every comparison runs at it."""
    sliding_window: int = 256
    """Much shorter than the context, so the sliding-window masks are exercised."""
    rows: int = 4
    """Sequences compared: 4 x 2048 = 8,192 tokens, the count the reproduction reported."""
    norm_jitter: float = 0.3
    """Norm scales start at 1 in transformers; jittered so a swapped or skipped norm shows."""


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "parity", help="compare logits: our model vs Hugging Face, or two checkpoints",
        description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="*", metavar="CHECKPOINT",
                        help="two checkpoint folders (a run's folder or one step folder)")
    parser.add_argument("--against", choices=["hf"], help="compare with Hugging Face Olmo3ForCausalLM")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="compute dtype of both models with --against hf (default float32)")
    parser.add_argument("--text", type=Path, metavar="FILE",
                        help="text to score (.txt, or .jsonl with a text field); default: the "
                             "Python standard library's own source text, present on every machine")
    parser.add_argument("--rows", type=int, default=None, help="sequences to compare")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random model (--against hf)")
    parser.add_argument("--run", help="store the result in this run (with two checkpoints)")
    parser.add_argument("--top-k", type=int, default=5, help="k of the top-k overlap (default 5)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    add_store_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.against and args.checkpoints:
        raise GapwatchError("give either --against hf or two checkpoints, not both")
    if args.against == "hf":
        require_extra("parity")
        return _run_hf(args)
    if len(args.checkpoints) != 2:
        raise GapwatchError("give two checkpoints to compare, or --against hf")
    require_extra("trainer")
    return _run_checkpoints(args)


# --- text -----------------------------------------------------------------------------------------
def _documents(text: Path | None):
    """Documents of --text, else the standard library's source text (always present offline)."""
    if text is not None:
        from evals.heldout_data import load_jsonl, load_text_file

        loader = load_jsonl if ".jsonl" in text.suffixes else load_text_file
        yield from loader(text).documents
        return
    from trainer.corpus import STDLIB, read_documents

    for doc in read_documents((STDLIB,)):
        yield doc.text


def token_rows(tokenizer, rows: int, seq_len: int, text: Path | None):
    """`rows` x `seq_len` tokens of real text, documents joined by end-of-text, deterministic."""
    import numpy as np

    needed = rows * seq_len
    stream: list[int] = []
    for doc in _documents(text):
        stream += [tokenizer.eot_token_id, *tokenizer.encode(doc)]
        if len(stream) >= needed:
            break
    if len(stream) < needed:
        raise GapwatchError(f"{text or 'the text'} has {len(stream)} tokens; parity needs {needed}")
    return np.asarray(stream[:needed], dtype=np.int32).reshape(rows, seq_len)


# --- against Hugging Face -------------------------------------------------------------------------
def hf_parity(dtype: str = "float32", setup: HFParitySetup = HFParitySetup(), text: Path | None = None,
              seed: int = 0, top_k: int = 5):
    """Our forward vs transformers' Olmo3ForCausalLM with the same (converted) weights."""
    import functools

    import jax
    import numpy as np
    import torch
    from transformers import Olmo3Config, Olmo3ForCausalLM

    from evals.parity import compare_logits_fns
    from evals.tokenizer import ByteTokenizer
    from trainer.convert_hf import params_from_hf
    from trainer.model import ModelConfig, forward

    config = ModelConfig(vocab_size=setup.vocab_size, d_model=setup.d_model, n_layers=setup.n_layers,
                         n_heads=setup.n_heads, n_kv_heads=setup.n_kv_heads, head_dim=setup.head_dim,
                         mlp_hidden=setup.mlp_hidden, max_seq_len=setup.seq_len,
                         sliding_window=setup.sliding_window, dtype=dtype)
    torch.manual_seed(seed)
    hf = Olmo3ForCausalLM(Olmo3Config(**config.to_hf_dict()))
    with torch.no_grad():
        for p in hf.parameters():
            if p.ndim == 1:
                p.add_(setup.norm_jitter * torch.randn_like(p))
    hf = hf.eval()
    # Converted from the float32 weights: in bfloat16 each side rounds the same numbers itself.
    params = jax.device_put(params_from_hf(hf.state_dict(), config))
    if dtype == "bfloat16":
        hf = hf.to(torch.bfloat16)
    ours_jit = jax.jit(functools.partial(forward, config=config))

    def ours(tokens):
        return ours_jit(params, tokens)

    def reference(tokens):
        with torch.no_grad():
            out = hf(input_ids=torch.from_numpy(np.asarray(tokens, dtype=np.int64))).logits
        return out.float().numpy()

    tokens = token_rows(ByteTokenizer(), setup.rows, setup.seq_len, text)
    return compare_logits_fns(reference, ours, tokens, batch_size=1, top_k=top_k), config


def _run_hf(args: argparse.Namespace) -> int:
    from evals.parity import FP32_MAX_KL_MEAN, FP32_MIN_TOP1, REPRODUCTION_BF16

    setup = HFParitySetup() if args.rows is None else HFParitySetup(rows=args.rows)
    report, config = hf_parity(args.dtype, setup, args.text, args.seed, args.top_k)
    passed = report.passes_fp32() if args.dtype == "float32" else None
    if args.json:
        print(json.dumps({"against": "hf", "dtype": args.dtype, "model": config.to_hf_dict(),
                          "report": report.to_dict(), "passed": passed,
                          "reference": vars(REPRODUCTION_BF16) if args.dtype == "bfloat16" else None}))
    else:
        title = (f"ours (JAX) vs transformers Olmo3ForCausalLM, {args.dtype}, "
                 f"{setup.rows} x {setup.seq_len} tokens of real text, {config.param_count():,} params")
        if args.dtype == "float32":
            bar = {"kl_mean": f"< {FP32_MAX_KL_MEAN:g}", "top1": f">= {FP32_MIN_TOP1:.1%}"}
            _print_report(report, title, extra=("required", bar))
            print("PASS" if passed else "FAIL: float32 parity is outside the required bar")
        else:
            ref = REPRODUCTION_BF16
            _print_report(report, title, extra=(
                f"{ref.label} ({ref.n_tokens:,} tokens)",
                {"kl_mean": _fmt(ref.kl_mean), "top1": f"{ref.top1:.2%}"}))
    return 0 if passed in (None, True) else 1


# --- two checkpoints ------------------------------------------------------------------------------
def checkpoint_parity(path_a: Path, path_b: Path, rows: int = 4, text: Path | None = None,
                      top_k: int = 5):
    """Both checkpoints' logits on the same tokens; returns the report and the loaded models."""
    import functools

    import jax

    from evals.parity import compare_logits_fns
    from trainer.checkpoint import load_for_eval
    from trainer.model import forward

    a, b = load_for_eval(path_a), load_for_eval(path_b)
    if a.tokenizer.to_json() != b.tokenizer.to_json():
        raise GapwatchError(f"{path_a} and {path_b} use different tokenizers: logits are not comparable")
    if a.config.vocab_size != b.config.vocab_size:
        raise GapwatchError(f"vocabularies differ ({a.config.vocab_size} vs {b.config.vocab_size})")
    seq_len = min(a.config.max_seq_len, b.config.max_seq_len)
    fa = jax.jit(functools.partial(forward, config=a.config))
    fb = jax.jit(functools.partial(forward, config=b.config))
    tokens = token_rows(a.tokenizer, rows, seq_len, text)
    report = compare_logits_fns(lambda t: fa(a.params, t), lambda t: fb(b.params, t), tokens,
                                batch_size=rows, top_k=top_k)
    return report, a, b


def _run_checkpoints(args: argparse.Namespace) -> int:
    from evals.monitor_log import log_parity, parity_metrics

    path_a, path_b = (Path(p) for p in args.checkpoints)
    report, a, b = checkpoint_parity(path_a, path_b, args.rows or 4, args.text, args.top_k)
    tokens_a, tokens_b = a.meta.get("tokens"), b.meta.get("tokens")
    if args.run:
        if tokens_a != tokens_b:
            raise GapwatchError(f"checkpoints are at different token counts ({tokens_a} vs {tokens_b}); "
                                "parity is tracked only at equal tokens")
        from monitor.client import Monitor

        with Monitor(args.run, store=args.store) as monitor:
            log_parity(monitor, a.step, report)
    if args.json:
        print(json.dumps({"a": {"path": str(path_a), "step": a.step, "tokens": tokens_a},
                          "b": {"path": str(path_b), "step": b.step, "tokens": tokens_b},
                          "report": report.to_dict(),
                          "stored": parity_metrics(report) if args.run else None}))
    else:
        _print_report(report, f"{path_a} (step {a.step}, {tokens_a} tokens) vs "
                              f"{path_b} (step {b.step}, {tokens_b} tokens)")
        if args.run:
            print(f"stored parity/kl_mean and parity/top1 in run {args.run!r} at step {a.step}")
    return 0


# --- output ---------------------------------------------------------------------------------------
def _fmt(value: float) -> str:
    return "0" if value == 0 else f"{value:.3e}"


def _print_report(report, title: str, extra: tuple[str, dict[str, str]] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("measure")
    table.add_column("ours", justify="right")
    if extra:
        table.add_column(extra[0], justify="right")
    rows = [("kl_mean", "mean KL per token (nats)", _fmt(report.kl_mean)),
            ("kl_max", "max KL per token (nats)", _fmt(report.kl_max)),
            ("top1", "top-1 agreement", f"{report.top1:.4%}"),
            ("topk", f"top-{report.top_k} overlap", f"{report.topk_overlap:.4%}"),
            ("diff", "max |Δlogit|", _fmt(report.max_abs_logit_diff)),
            ("n", "positions compared", f"{report.n_tokens:,}")]
    for key, label, value in rows:
        table.add_row(label, value, *([extra[1].get(key, "")] if extra else []))
    worst = Table(title="positions that differ most")
    for column in ("row", "position", "KL", "top-1 A", "top-1 B", "max |Δlogit|"):
        worst.add_column(column, justify="right")
    for w in report.worst:
        worst.add_row(str(w.row), str(w.position), _fmt(w.kl), str(w.reference_top1),
                      str(w.candidate_top1), _fmt(w.max_abs_logit_diff))
    console = Console()
    console.print(table)
    console.print(worst)
