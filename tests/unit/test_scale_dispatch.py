"""The emulator's dispatch patch: moto's backend names listed once per process, not once per request."""

from __future__ import annotations

import os

from spotrun.local.patches import dispatch
from spotrun.local.patches.reversible import PatchSet


def test_the_backend_names_are_listed_once_and_stay_the_same(monkeypatch):
    from moto import backends

    # Given moto's own listing, and a count of the directory listings made
    expected = list(backends.list_of_moto_modules())
    listings: list[str] = []
    real = os.listdir

    def counted(path):
        listings.append(path)
        return real(path)

    monkeypatch.setattr(os, "listdir", counted)
    patches = PatchSet()
    # When the patch is installed and the names are asked for on three requests
    dispatch.install(patches)
    try:
        answers = [list(backends.list_of_moto_modules()) for _ in range(3)]
    finally:
        patches.undo_all()
    # Then every answer is moto's listing, and the directory was listed once
    assert answers == [expected] * 3
    assert len(listings) == 1
