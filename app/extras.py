"""The optional parts of the distribution a command needs, checked before it imports them.

The core (client, store, importers, detectors, watch, alerts, CLI, dashboard, report) installs with
`pip install gapwatch`; the trainer, the evals and the logit parity bring heavy stacks (JAX, lm-eval,
torch) as extras of pyproject.toml. A command that needs one says which, in one line, instead of
failing on an import deep inside.
"""

from __future__ import annotations

from importlib.util import find_spec

from monitor.errors import GapwatchError

# The top-level modules each extra of pyproject.toml installs, with its extras inside it
# (trainer includes evals; parity includes trainer).
_EVALS = ("lm_eval", "datasets")
_TRAINER = ("jax", "optax", "grain", "orbax", "tokenizers", *_EVALS)
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "evals": _EVALS,
    "trainer": _TRAINER,
    "parity": (*_TRAINER, "torch", "transformers"),
}


class MissingExtra(GapwatchError):
    """A command needs an extra of the distribution that is not installed."""


def require_extra(extra: str) -> None:
    """Raise MissingExtra, naming the extra and how to install it, unless all its modules are importable."""
    missing = [name for name in EXTRA_MODULES[extra] if find_spec(name) is None]
    if missing:
        raise MissingExtra(f"needs the {extra} extra ({', '.join(missing)} not installed): "
                           f"pip install 'gapwatch[{extra}]'")
