"""The MySQLCluster API: one module per served version, and the conversion between them.

`v1` is the hub (stored, and the only version the controller reads or writes); `v1beta1` has its shape,
`v1alpha1` is the oldest spoke; `conversion` maps every spoke to and from the hub; `schedule` holds the
one spec check the CRD's schema cannot make (a cron expression as the CronJob controller parses it).
Types only: nothing here talks to a cluster. The database engines' catalogue (`database.engines`) is
the one thing the types import, for the versions each engine accepts.
"""
