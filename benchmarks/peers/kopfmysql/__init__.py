"""The reference MySQLCluster reconciler on kopf (see handlers.py)."""
