"""gapwatch inside the trainers people run: one module per framework, each behind its extra.

- `monitor.integrations.transformers.GapwatchCallback`: a Hugging Face `TrainerCallback`
  (`pip install 'gapwatch[transformers]'`).
- `monitor.integrations.lightning.GapwatchLogger`: a Lightning `Logger` (`gapwatch[lightning]`).
- `monitor.integrations.accelerate.GapwatchTracker`: an Accelerate tracker for custom loops
  (`gapwatch[accelerate]`).

Each module imports its framework as it loads, so nothing in the core imports this package; this
file imports neither. The shared parts (opening the run and its reference, naming the metrics)
are `session.py` and `names.py`.
"""
