"""Reversible replacement of attributes (methods of moto's classes), applied on start and undone on stop."""

from __future__ import annotations

from typing import Any

_MISSING = object()


class Patch:
    """Replace ``owner.name`` with ``replacement`` until :meth:`undo`.

    :attr:`wrapped` is the attribute as it resolved before the patch, for replacements that call through (None
    when the patch adds an attribute the owner lacked, e.g. an action moto does not implement).
    """

    def __init__(self, owner: Any, name: str, replacement: Any):
        self.owner = owner
        self.name = name
        self.replacement = replacement
        self.wrapped: Any = getattr(owner, name, None)
        self._saved: Any = _MISSING
        self._applied = False

    def apply(self) -> None:
        """Install the replacement (idempotent)."""
        if not self._applied:
            # vars() rather than getattr(): an inherited attribute must be deleted again, not copied down.
            self._saved = vars(self.owner).get(self.name, _MISSING)
            setattr(self.owner, self.name, self.replacement)
            self._applied = True

    def undo(self) -> None:
        """Restore the attribute as it was (idempotent)."""
        if not self._applied:
            return
        if self._saved is _MISSING:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self._saved)
        self._applied = False


class PatchSet:
    """Patches applied together and undone in reverse order."""

    def __init__(self) -> None:
        self._patches: list[Patch] = []

    def add(self, owner: Any, name: str, replacement: Any) -> Patch:
        """Apply a patch now and remember it for :meth:`undo_all`."""
        patch = Patch(owner, name, replacement)
        patch.apply()
        self._patches.append(patch)
        return patch

    def undo_all(self) -> None:
        """Undo every patch, newest first (idempotent)."""
        while self._patches:
            self._patches.pop().undo()
