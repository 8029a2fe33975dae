"""The MySQLCluster controller: what one reconcile does, and its wiring on the runtime's Manager.

`wiring` builds the Manager; `reconciler` drives a live cluster towards its spec; `finalizer` takes the
final backup on deletion; `writer` makes every write to a child, the status and the Events;
`status` computes the status; `versions` decides the engine and tag; `client`, `cache`, `events` and
`kinds` talk to the apiserver; `children/` builds the child objects and decides whose an object is.
"""
