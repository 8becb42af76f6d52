package layout

//go:generate go run ./cmd/layoutgen
