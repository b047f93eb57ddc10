"""Judging runs: one detection engine (`engine.DetectionEngine`) runs the configured detectors over a
run and its reference, whole or incrementally; `align` puts the pair on one axis first; `judge` holds
the entry points that `gapwatch detect`, the report, the dashboard and the demo call (a pair in
memory, or a stored run, with its findings, clean verdicts and not-judged reasons stored back).
"""
