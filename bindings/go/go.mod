module github.com/idmint/idmint/bindings/go

go 1.19
