"""`gapwatch --help` lists every subcommand and each answers --help."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from app.cli import build_parser, main
from app.options import FAIL_EXIT


def subcommands() -> list[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return sorted(action.choices)


def test_help_lists_every_subcommand():
    out = subprocess.run([sys.executable, "-m", "app", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    names = subcommands()
    assert "runs" in names
    for name in names:
        assert name in out.stdout


def test_each_subcommand_has_help():
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    for name, sub in action.choices.items():
        text = sub.format_help()
        assert text.startswith("usage: gapwatch " + name), name


def test_no_command_prints_help_and_fails():
    out = subprocess.run([sys.executable, "-m", "app"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "usage: gapwatch" in out.stdout


# --- for scripts and CI ---------------------------------------------------------------------------
def _store_with_a_nan_run(url: str) -> str:
    import numpy as np
    import pandas as pd

    from monitor.store import open_store

    steps = np.arange(1, 401)
    loss = 3.0 + 2.0 * np.exp(-steps / 100.0) + 0.01 * np.sin(steps)
    with open_store(url) as store:
        for name in ("a-clean-run-with-a-long-name", "a-run-that-went-nan"):
            values = loss.copy()
            if name.endswith("nan"):
                values[300] = np.nan
            store.ensure_run(name)
            store.write_metrics(name, pd.DataFrame({"step": steps, "key": "train/loss", "value": values}))
    return url


def test_fail_on_critical_gates_a_ci_job_on_a_nan(sqlite_url, capsys):
    url = _store_with_a_nan_run(sqlite_url)
    nan = ["detect", "--run", "a-run-that-went-nan", "--store", url, "--no-write"]
    assert main(nan) == 0  # without --fail-on, findings are reported, not an error
    # The summary counts the severities of what the table lists: incidents, or detections ungrouped.
    summary = capsys.readouterr().err.splitlines()
    assert "a-run-that-went-nan: 1 incident(s) (1 critical) from 1 detection(s)" in summary
    assert main([*nan, "--ungrouped"]) == 0
    assert "a-run-that-went-nan: 1 detection(s) (1 critical) in 1 incident(s)" in capsys.readouterr().err.splitlines()
    assert main([*nan, "--fail-on", "critical"]) == FAIL_EXIT
    capsys.readouterr()
    assert main([*nan, "--fail-on", "warning", "--json"]) == FAIL_EXIT
    found = json.loads(capsys.readouterr().out)
    assert any(r["detector"] == "nonfinite" and r["severity"] == "critical" for r in found)
    clean = ["detect", "--run", "a-clean-run-with-a-long-name", "--store", url, "--no-write"]
    capsys.readouterr()
    assert main([*clean, "--fail-on", "critical"]) == 0
    assert capsys.readouterr().out == "severity\tincident\tid\tstate\tsteps\tdetections\tfinding\n"  # a header, no rows
    assert main([*clean, "--fail-on", "warning"]) == 0


def test_detect_in_a_pipe_prints_whole_names_on_one_line(sqlite_url):
    url = _store_with_a_nan_run(sqlite_url)
    out = subprocess.run([sys.executable, "-m", "app", "detect", "--run", "a-run-that-went-nan", "--store", url,
                          "--no-write", "--fail-on", "critical"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "40"})
    assert out.returncode == FAIL_EXIT, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header == "severity\tincident\tid\tstate\tsteps\tdetections\tfinding"
    nonfinite = next(r.split("\t") for r in rows if "\tNaN or Inf in the run\t" in r)
    assert nonfinite[:5] == ["critical", "NaN or Inf in the run", "a-run-that-went-nan:instability#1", "open", "301"]
    assert "a-run-that-went-nan: " in out.stderr and "critical" in out.stderr
    # One progress line per phase, for a CI log.
    assert "gapwatch detect: [" in out.stderr and "loading a-run-that-went-nan" in out.stderr


def test_version_is_the_installed_distributions():
    from importlib.metadata import version

    out = subprocess.run([sys.executable, "-m", "app", "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == f"gapwatch {version('gapwatch')}"


def test_slow_commands_print_a_line_per_phase_into_a_log(tmp_path, sqlite_url):
    source = tmp_path / "metrics.csv"
    source.write_text("step,train/loss\n" + "".join(f"{s},{3.0 - s / 1000:.4f}\n" for s in range(1, 301)))
    out = subprocess.run([sys.executable, "-m", "app", "import", str(source), "--run", "csv-run", "--store", sqlite_url],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    phases = [line for line in out.stderr.splitlines() if line.startswith("gapwatch import: [")]
    # A CSV is read and written chunk by chunk: one phase.
    assert len(phases) == 1 and f"importing {source} (csv) as csv-run" in phases[0]
    assert "created run 'csv-run'" in out.stderr


def test_a_long_option_is_taken_only_as_spelt_out(tmp_path, sqlite_url, capsys):
    """`import --reference ref` records the imported run's reference; a prefix of another option
    (`--reference-o`) is an error, never quietly that option (the opposite link)."""
    import pytest

    from monitor.store import open_store

    for name in ("ref", "cand"):
        (tmp_path / f"{name}.csv").write_text("step,train/loss\n" + "".join(f"{s},{3 - s / 100}\n" for s in range(5)))
    assert main(["import", str(tmp_path / "cand.csv"), "--run", "cand", "--reference", "ref",
                 "--store", sqlite_url]) == 2
    assert "--reference 'ref': no such run" in capsys.readouterr().err
    assert main(["import", str(tmp_path / "ref.csv"), "--run", "ref", "--store", sqlite_url]) == 0
    assert main(["import", str(tmp_path / "cand.csv"), "--run", "cand", "--reference", "ref",
                 "--store", sqlite_url]) == 0
    assert "compared with 'ref'" in " ".join(capsys.readouterr().err.split())
    # Following a growing log: the link is recorded once the run exists, at the first poll.
    assert main(["import", str(tmp_path / "cand.csv"), "--run", "cand-live", "--reference", "ref", "--follow",
                 "--idle-timeout", "0", "--store", sqlite_url]) == 0
    with open_store(sqlite_url, read_only=True) as store:
        assert store.get_run("cand")["reference"] == "ref" and store.get_run("ref")["reference"] is None
        assert store.get_run("cand-live")["reference"] == "ref"
    with pytest.raises(SystemExit):
        main(["import", str(tmp_path / "ref.csv"), "--run", "ref", "--reference-o", "cand", "--store", sqlite_url])
    assert "unrecognized arguments: --reference-o" in capsys.readouterr().err


def test_detect_refuses_a_run_as_its_own_reference_and_bad_detector_settings(sqlite_url, tmp_path, capsys):
    url = _store_with_a_nan_run(sqlite_url)
    detect = ["detect", "--run", "a-run-that-went-nan", "--store", url, "--no-write"]
    assert main([*detect, "--reference", "a-run-that-went-nan"]) == 2
    assert capsys.readouterr().err == "gapwatch detect: error: run 'a-run-that-went-nan' cannot be its own reference\n"
    config = tmp_path / "watch.yaml"
    config.write_text('detector_params: {spike: {threshold: "abc"}}\n')
    for command in (detect, ["report", "--run", "a-run-that-went-nan", "--reference", "a-clean-run-with-a-long-name",
                             "--store", url, "-o", str(tmp_path / "r.html")]):
        assert main([*command, "--config", str(config)]) == 2
        err = capsys.readouterr().err
        assert err == (f"gapwatch {command[0]}: error: watch config {config}: detector settings: threshold of "
                       "detector spike must be a finite number, not 'abc'\n")


def test_the_config_help_names_only_the_options_each_command_has(capsys):
    for command, overrides in (("report", "(--axis, when given, overrides it)"),
                               ("detect", "(--detectors and --axis, when given, override it)")):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert overrides in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("port, message", [
    ("99999", "99999 is not a TCP port (1 to 65535, or 0 for any free one)"),
    ("-1", "-1 is not a TCP port (1 to 65535, or 0 for any free one)"),
    ("http", "'http' is not a port number"),
])
def test_dashboard_refuses_a_port_out_of_range_before_it_starts(sqlite_url, capsys, port, message):
    with pytest.raises(SystemExit) as exited:
        main(["dashboard", "--store", sqlite_url, "--port", port])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"gapwatch dashboard: error: argument --port: {message}"
