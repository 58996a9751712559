"""The archive_buckets deployment option: extra archive buckets reach the functions as a setting, and exactly the
archive and restore paths are granted on them (one synth with the option given)."""

from __future__ import annotations

import json

import pytest

from infra.app import build_app
from tests.infra.conftest import Synthesized
from tests.infra.test_storage_and_network import actions_of, statements_of

EXTRA = ("team-models", "shared-archive")


@pytest.fixture(scope="module")
def with_archive_buckets(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    outdir = tmp_path_factory.mktemp("cdk.out.archive")
    app, stack = build_app(outdir=str(outdir), context={"archive_buckets": ",".join(EXTRA)})
    template = app.synth().get_stack_by_name(stack.stack_name).template  # cdk-nag runs in here
    return Synthesized(outdir=outdir, stack_name=stack.stack_name, template=json.loads(json.dumps(template)))


def _on(synthesized: Synthesized, function: str, bucket: str) -> set[str]:
    """Actions the function's role is granted on objects of ``bucket`` (by its literal name)."""
    role = synthesized.properties(synthesized.marked("function")[function])["Role"]["Fn::GetAtt"][0]
    actions: set[str] = set()
    for statement in statements_of(synthesized, role):
        if f":s3:::{bucket}/" in json.dumps(statement["Resource"]):
            actions |= set(actions_of(statement))
    return actions


def test_extra_archive_buckets_get_exactly_the_archive_and_restore_grants(
    with_archive_buckets: Synthesized,
) -> None:
    # Given a deployment with two extra archive buckets
    for bucket in EXTRA:
        # Then the archive function may write the model there, the API may read and restore it
        assert _on(with_archive_buckets, "archive", bucket) == {
            "s3:PutObject",
            "s3:PutObjectTagging",
            "s3:AbortMultipartUpload",
        }
        assert _on(with_archive_buckets, "api", bucket) == {"s3:GetObject", "s3:RestoreObject"}
        # And no other function touches it (submit only knows its name, to check manifests)
        for other in ("submit", "finalize", "agent_step", "scheduled_run"):
            assert _on(with_archive_buckets, other, bucket) == set()


def test_the_option_reaches_the_functions_that_check_and_use_it(with_archive_buckets: Synthesized) -> None:
    functions = with_archive_buckets.marked("function")
    for name in ("submit", "api", "archive"):
        variables = with_archive_buckets.properties(functions[name])["Environment"]["Variables"]
        assert variables["SPOTRUN_ARCHIVE_BUCKETS"] == ",".join(EXTRA)


def test_without_the_option_no_other_bucket_is_granted(synthesized: Synthesized) -> None:
    for bucket in EXTRA:
        assert _on(synthesized, "archive", bucket) == set()
        assert _on(synthesized, "api", bucket) == set()
