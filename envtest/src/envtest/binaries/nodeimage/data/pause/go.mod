module envtest.local/pause

go 1.22
