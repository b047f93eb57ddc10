"""A framework's metric names as gapwatch keys, through the importers' profile rules.

Each integration declares a `Profile` of its framework's names (the first matching rule wins, a
rule without a key drops the name); a name no rule matches keeps its own name made a valid key
(`aux_loss` -> `extra/aux_loss`), so nothing logged disappears. Names are mapped once each.
"""

from __future__ import annotations

from typing import Any

from monitor.importers.profiles import Profile


class KeyMapper:
    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._keys: dict[str, str | None] = {}

    def key(self, name: str) -> str | None:
        """The gapwatch key of `name`, or None when it is dropped."""
        try:
            return self._keys[name]
        except KeyError:
            key, _, _ = self.profile.map_name(name)
            self._keys[name] = key
            return key

    def metrics(self, logged: dict[str, Any]) -> dict[str, Any]:
        """The logged values under their keys, without the dropped names. Two names onto one key
        keep the first (a framework that logs `loss` and `train/loss` logs the same value)."""
        out: dict[str, Any] = {}
        for name, value in logged.items():
            key = self.key(name)
            if key is not None and key not in out:
                out[key] = value
        return out
