"""A cluster-wide kopf operator: each cluster-scoped Tenant gets a namespace of its own with a
welcome ConfigMap in it; the Tenant's status counts the tenant namespaces of the whole cluster."""
