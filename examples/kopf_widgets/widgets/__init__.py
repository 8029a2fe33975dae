"""A kopf operator written as kopf's walkthrough writes one: each Widget gets a ConfigMap of its own
(made with the official client's default configuration, `kubernetes.client.CoreV1Api()`), kept in
step with the Widget's size and labels; handlers in two modules, a Prometheus counter at import."""
