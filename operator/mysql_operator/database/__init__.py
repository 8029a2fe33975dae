"""The database servers and what runs inside their pods: no Kubernetes API calls, no MySQLCluster.

`engines` (what differs between MySQL and MariaDB), `images` (which image runs each), `replication`
(the pod's containers and the scripts that make one primary and read-only replicas of it),
`backup` (the dump, archive and restore scripts). The controller builds children from these.
"""
