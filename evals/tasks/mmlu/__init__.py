"""MMLU: one config per subject and the groups that average them, as lm-eval's mmlu/default has."""
