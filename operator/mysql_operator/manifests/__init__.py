"""Everything deployed besides the image, generated from the code: `python -m mysql_operator.manifests`.

`generate` writes (or `--check`s) the files; `schema` turns the pydantic models into the CRD's
structural schema; `rbac` declares each permission once with its reason; `webhooks` the webhook
configurations and their certificate; `network_policy` who may reach the operator's pods.
"""
