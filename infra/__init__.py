"""The CDK app that deploys spotrun into an AWS account (``python -m infra.app``; see infra/README.md).

Everything it creates is built from :data:`spotrun.shape.SHAPE`, the same declaration the embedded runtime
(:mod:`spotrun.local.provision`) builds from, so the deployed system and the local one cannot drift apart.
"""
