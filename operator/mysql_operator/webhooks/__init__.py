"""The operator's webhooks (conversion, validation, defaulting), served by `runtime.webhook`.

`server` wires every path onto one HTTPS server; `admission` holds the validating and defaulting
handlers. The generated configurations that point the apiserver here are `manifests.webhooks`.
"""
