module helm-guard/benches/go-413

go 1.19
