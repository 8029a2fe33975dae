module envtest.local/capwrap

go 1.22
