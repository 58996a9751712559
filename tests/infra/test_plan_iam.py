"""The IAM behind the plan and admission's existence check: ListBucket on the deployer's data buckets for every
entry point (the API, the S3 drop, a schedule's firing), no read of them; the API reads spot prices."""

from __future__ import annotations

import json

import pytest

from infra.app import build_app
from tests.infra.conftest import Synthesized
from tests.infra.test_storage_and_network import actions_of, statements_of

DATA = ("raw-data", "curated")


@pytest.fixture(scope="module")
def with_data_buckets(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    outdir = tmp_path_factory.mktemp("cdk.out.data")
    app, stack = build_app(outdir=str(outdir), context={"data_buckets": ",".join(DATA)})
    template = app.synth().get_stack_by_name(stack.stack_name).template  # cdk-nag runs in here
    return Synthesized(outdir=outdir, stack_name=stack.stack_name, template=json.loads(json.dumps(template)))


def _statements(synthesized: Synthesized, function: str) -> list[dict]:
    role = synthesized.properties(synthesized.marked("function")[function])["Role"]["Fn::GetAtt"][0]
    return statements_of(synthesized, role)


def test_every_entry_point_may_list_the_data_buckets_and_read_none(with_data_buckets: Synthesized) -> None:
    for function in ("api", "submit", "scheduled_run"):
        statements = _statements(with_data_buckets, function)
        for bucket in DATA:
            # Then it lists the bucket (does an input exist?), and nothing else of it: no object is read
            on_bucket = [s for s in statements if f":s3:::{bucket}" in json.dumps(s["Resource"])]
            assert [actions_of(s) for s in on_bucket] == [["s3:ListBucket"]], (function, on_bucket)
    # And the functions that stage nothing get no access to them
    for other in ("finalize", "agent_step", "archive", "acquire"):
        assert not any("raw-data" in json.dumps(s["Resource"]) for s in _statements(with_data_buckets, other))


def test_the_api_reads_spot_prices_for_the_plan(synthesized: Synthesized) -> None:
    statements = _statements(synthesized, "api")
    assert any("ec2:DescribeSpotPriceHistory" in actions_of(s) for s in statements)
    assert any("ec2:DescribeSubnets" in actions_of(s) for s in statements)
