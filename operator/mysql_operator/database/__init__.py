"""The database servers and what runs inside their pods: no Kubernetes API calls, no MySQLCluster.

`engines` (what differs between MySQL and MariaDB), `images` (which image runs each), `replication`
(the pod's containers and the scripts that make one primary and read-only replicas of it),
`backup` (the dump, archive and restore scripts), `pod` (the database pod's spec), `identity` (the
datadir's engine, version and cluster, and the check that refuses another's data). Failover's database
half: `gtid` (positions of both engines, and which covers the others), `failover` (when a primary is
lost, which replica replaces it: decisions only), `actions` (the scripts the operator execs to observe,
fence, promote and repoint). The controller builds children from these.
"""
