"""Entry point of the CDK app: ``python -m infra.app`` (``make synth``) or ``npx cdk synth`` (via cdk.json).

Synthesizes the spotrun stack into ``cdk.out`` (or ``$CDK_OUTDIR`` when the CDK CLI runs it) with cdk-nag's
AwsSolutions pack as a validation plugin: an unacknowledged finding fails the synth.
"""

from __future__ import annotations

import os

from spotrun.shape import REPO_ROOT


def _jsii_environment() -> None:
    """Keep jsii's ~200 MB package cache and the CDK's home inside the project (both gitignored)."""
    cache = REPO_ROOT / ".cache"
    os.environ.setdefault("JSII_RUNTIME_PACKAGE_CACHE_ROOT", str(cache / "jsii"))
    os.environ.setdefault("CDK_HOME", str(cache / "cdk"))
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")


_jsii_environment()

# jsii reads the variables above when it starts, on the first import of a CDK module.
from aws_cdk import App, Environment, Validations  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402

from infra.options import StackOptions  # noqa: E402
from infra.stack import SpotrunStack  # noqa: E402
from spotrun.shape import SHAPE  # noqa: E402


def build_app(
    outdir: str | None = None, context: dict[str, object] | None = None
) -> tuple[App, SpotrunStack]:
    """Build the app with its one stack and the cdk-nag checks, without synthesizing it.

    Parameters
    ----------
    outdir
        Cloud assembly directory; ``$CDK_OUTDIR`` (set by the CDK CLI) or ``cdk.out`` when omitted.
    context
        Extra context (the same keys as ``-c key=value``).

    Returns
    -------
    tuple[App, SpotrunStack]
        The app and its stack.
    """
    app = App(outdir=outdir or os.environ.get("CDK_OUTDIR") or str(REPO_ROOT / "cdk.out"), context=context)
    options = StackOptions.from_context(app.node)
    # Environment-agnostic unless an existing VPC must be looked up (a lookup needs a concrete account).
    env = (
        Environment(
            account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=os.environ.get("CDK_DEFAULT_REGION")
        )
        if options.vpc_id
        else None
    )
    stack = SpotrunStack(
        app,
        options.stack_name,
        shape=SHAPE,
        options=options,
        env=env,
        description="spotrun: runs deep-learning training on EC2 Spot GPUs through interruptions",
    )
    # Acknowledged findings are also written into the template's metadata, so the reasons travel with it.
    Validations.of(app).add_plugins(AwsSolutionsChecks(app, write_suppressions_to_cloud_formation=True))
    return app, stack


def main() -> None:
    """Synthesize the app (the cdk-nag report is printed and fails the synth when it finds anything)."""
    app, _ = build_app()
    app.synth()


if __name__ == "__main__":
    main()
