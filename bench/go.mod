// The peer comparison for issue 7. Its own module so that the main module
// never depends on the peers' clients.
module github.com/metaqgo/metaq/bench

go 1.26.8

replace github.com/metaqgo/metaq => ../

require (
	github.com/metaqgo/metaq v0.0.0-00010101000000-000000000000
	github.com/nats-io/nats.go v1.55.0
	github.com/nsqio/go-nsq v1.1.0
	github.com/redis/rueidis v1.0.79
)

require (
	github.com/golang/snappy v0.0.1 // indirect
	github.com/klauspost/compress v1.20.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
