"""IAM's policy language, evaluated offline: the parts behind :mod:`spotrun.local.iam.policy.evaluate`.

``patterns`` turns a policy string (wildcards, policy variables, ARNs) into a matcher; ``conditions`` holds the
condition operators. :mod:`spotrun.local.iam.policy.evaluate` is the public entry point and says what of IAM it follows.
"""
