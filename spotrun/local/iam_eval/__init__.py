"""IAM's policy language, evaluated offline: the parts behind :mod:`spotrun.local.policy_eval`.

``patterns`` turns a policy string (wildcards, policy variables, ARNs) into a matcher; ``conditions`` holds the
condition operators. :mod:`spotrun.local.policy_eval` is the public entry point and says what of IAM it follows.
"""
