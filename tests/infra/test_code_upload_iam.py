"""The API function's access for code uploads: a listing of code/ and the presigned PUT of code/* only."""

from __future__ import annotations

import json

from spotrun.model.layout import CODE_PREFIX
from tests.infra.conftest import Synthesized
from tests.infra.test_storage_and_network import actions_of, statements_of


def test_the_api_function_writes_code_archives_and_no_other_key(synthesized: Synthesized) -> None:
    # Given the API function's role in the synthesized stack
    role = synthesized.properties(synthesized.marked("function")["api"])["Role"]["Fn::GetAtt"][0]
    statements = statements_of(synthesized, role)
    # When its S3 writes are gathered
    puts = [s for s in statements if "s3:PutObject" in actions_of(s)]
    # Then code/* of the jobs bucket is written (the presigned PUT), and the only other write is the schedules'
    # manifests (a deadline's move writes the agent's notice from the agents' API function)
    code = [s for s in puts if json.dumps(s["Resource"]).endswith(f'/{CODE_PREFIX}*"]]}}')]
    assert len(code) == 1, json.dumps(puts)
    assert set(actions_of(code[0])) == {"s3:PutObject"}
    others = [json.dumps(s["Resource"]) for s in puts if s is not code[0]]
    assert all('/schedules/*"' in resource for resource in others), others
    assert len(others) == 1, others
    # And it lists the jobs bucket, under code/ (whether an archive is there) as anywhere a manifest's inputs
    # may lie (admission: do they exist?), and nothing else of it
    (listing,) = [s for s in statements if "s3:ListBucket" in actions_of(s)]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["*"]}}
