module github.com/metaqgo/metaq

go 1.26.8

require (
	github.com/edsrzf/mmap-go v1.2.0 // indirect
	github.com/go-zookeeper/zk v1.0.4 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	gopkg.in/ini.v1 v1.68.0 // indirect
)
replace github.com/go-zookeeper/zk => ./third_party/go-zookeeper-zk
