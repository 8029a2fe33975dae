module envtest.local/mysqlstandin

go 1.22
