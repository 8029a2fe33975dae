"""A MySQLCluster's children: how each is built, whose a live one is, and when one needs a write.

`resources` builds them (pure functions of the cluster), `ownership` decides whose a same-named object
is, `projection` compares desired with live, `ssa` applies and upgrades managed fields, `immutable`
keeps fields fixed at creation out of every apply, `quantity` compares resource sizes; `backups` builds
the backup volume, CronJob and final backup Job, `tls` the cluster's replication CA and certificate,
`problems` what keeps a cluster from its spec.
"""
