"""The command line: `python -m mysql_operator run | migrate-storage`.

`main` parses and dispatches, `kubeconfig` loads the identity, `credentials` keeps an in-cluster token
fresh, `logs` formats records, `storage_migration` is the one-shot `migrate-storage` command.
"""
