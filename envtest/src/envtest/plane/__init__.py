"""The local control plane: processes (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
kwok), their flags and ports, and the supervisor that runs a plane detached from the caller."""
