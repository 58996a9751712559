"""The emulator's IAM: every request moto serves is authenticated and judged as AWS would, before it is served.

moto serves every service without access control (its own IAM simulation, when enabled, evaluates neither
resources, conditions nor session policies). On AWS each request is signed by an identity and judged against
that identity's policies; the emulator does the same in one place, for every service:

- :mod:`.identities` says who signed a request (the SigV4 ``Authorization`` header or a presigned query): the
  runtime's own administrative keys (the runtime's, the in-process functions', moto's Step Functions
  interpreter's), judged by nothing, as a deployment's administrator; a session of a role (an instance's role
  session from its IMDS, a session of the job-access role assumed through moto's STS), judged; or nobody
  (unsigned, or a key no one issued), refused;
- :mod:`.managed_policies` holds the AWS managed policies the deployment attaches, written out from AWS's
  published documents with their version and date, and puts them in moto's IAM so that roles hold them;
- :mod:`.roles` creates the deployment's roles in moto's IAM with the statements the CDK app gives them;
- :mod:`.resources` names, per service, the resource ARNs (and condition keys) of each action as the Service
  Authorization Reference defines them; an action without resource-level permissions is judged on ``*``;
- :mod:`.judge` hooks moto's two authorization points (``BaseResponse._authenticate_and_authorize_normal_action``
  for the JSON, query and REST-JSON services, ``S3Response._authenticate_and_authorize_s3_action`` for S3),
  evaluates the role's inline and attached policies and the session policy with
  :mod:`spotrun.local.iam.policy.evaluate`, and refuses with each service's own error.
"""
