"""The MySQLCluster controller: what one reconcile does, and its wiring on the runtime's Manager.

`wiring` builds the Manager; `reconciler` drives a live cluster towards its spec; `finalizer` takes the
final backup on deletion; `writer` makes every write to a child, the status and the Events;
`status` computes the status; `versions` decides the engine and tag; `client`, `cache`, `events` and
`kinds` talk to the apiserver; `children/` builds the child objects and decides whose an object is.
Roles and failover: `roles` keeps one pod labelled primary and decides when it is lost, `failover` moves
the primary (fence, promote, repoint) for a failover or a switchover, `members` is what a pass sees of
the database pods and how it execs into them; `backupjob` places the final backup Job and says why one
cannot run.
"""
