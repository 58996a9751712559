"""The order `make test` starts the e2e and chaos files in: the slowest first, each file's tests together."""

from __future__ import annotations

from dataclasses import dataclass

from spotrun.shape import REPO_ROOT
from tests.conftest import SLOWEST_FIRST, pytest_collection_modifyitems


@dataclass
class _Item:
    nodeid: str


def test_the_slowest_files_come_first_slowest_first_and_the_rest_keep_their_order():
    # Given items collected alphabetically: ordinary files after five of the slowest, one of them with two tests
    collected = [
        _Item("tests/e2e/test_deadline.py::test_a"),
        _Item("tests/e2e/test_demo_cli.py::test_d"),
        _Item("tests/e2e/test_interruptions.py::test_one"),
        _Item("tests/e2e/test_interruptions.py::test_two"),
        _Item("tests/e2e/test_isolation.py::test_c"),
        _Item("tests/e2e/test_limits.py::test_f"),
        _Item("tests/e2e/test_spine.py::test_b"),
        _Item("tests/e2e/test_workdir.py::test_e"),
    ]
    items = list(collected)

    # When the collection hook orders them
    pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]

    # Then the slowest come first, in SLOWEST_FIRST's order, each file's tests together and in order; the others
    # follow as collected
    assert [item.nodeid for item in items] == [
        "tests/e2e/test_interruptions.py::test_one",
        "tests/e2e/test_interruptions.py::test_two",
        "tests/e2e/test_deadline.py::test_a",
        "tests/e2e/test_demo_cli.py::test_d",
        "tests/e2e/test_limits.py::test_f",
        "tests/e2e/test_isolation.py::test_c",
        "tests/e2e/test_spine.py::test_b",
        "tests/e2e/test_workdir.py::test_e",
    ]


def test_every_file_named_slowest_exists():
    # Given the list of the slowest files
    # When each is looked for in the repository
    missing = [path for path in SLOWEST_FIRST if not (REPO_ROOT / path).is_file()]
    # Then every one is there (a renamed file would otherwise silently lose its head start)
    assert missing == []
