"""A tiny kopf operator: each Widget's status reports its size and, once handled, `phase: Ready`."""
