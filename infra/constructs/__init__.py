"""One construct per capability; :class:`infra.stack.SpotrunStack` only composes them."""
