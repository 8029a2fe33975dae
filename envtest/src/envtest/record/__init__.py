"""The record: what each test's operator asked of kube-apiserver, read from the apiserver's own audit
log (`policy`), followed as it grows (`follow`), attributed to tests by the operator's identity
(`events`, `book`), and judged: hot loops (`hotloop`), the grants used and unused (`usage`), the
least Role that covers it (`suggest`)."""
