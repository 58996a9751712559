"""Bounded soaks: the e2e fixtures (one emulator per module, the direct run's model) serve here too."""

from tests.e2e.conftest import direct_model, runtime  # noqa: F401 - fixtures re-exported for this folder
