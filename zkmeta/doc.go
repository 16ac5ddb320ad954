// Package zkmeta is the one place that knows metaq's ZooKeeper layout (MetaQ's; docs/zookeeper.md, "The layout"):
//
//	<root>/brokers/ids/<brokerId>/master                       E  meta://host:port
//	<root>/brokers/ids/<brokerId>/slave<n>                     E  meta://host:port
//	<root>/brokers/topics/<topic>/<brokerId>-m   (-s<n>)       E  <numPartitions>
//	<root>/brokers/topics-pub/<topic>/<brokerId>-m             E  {"numParts":N,"broker":"<brokerId>-m"}
//	<root>/brokers/topics-sub/<topic>/<brokerId>-m (-s<n>)     E  {"numParts":N,"broker":"<brokerId>-m"}
//	<root>/consumers/<group>/ids/<group>_<consumerId>          E  topic1,topic2
//	<root>/consumers/<group>/owners/<topic>/<brokerId>-<part>  E  <group>_<consumerId>
//	<root>/consumers/<group>/offsets/<topic>/<brokerId>-<part> P  <msgId>-<offset>
//
// root is zk.zkRoot (default /meta); a chroot in the connect string ("host:2181/chroot") is
// honoured although go-zookeeper has none: Client prefixes every path.
//
// Client wraps a go-zookeeper connection: it drains the event channel, tracks the session,
// re-creates registered ephemeral nodes after a session expiry (EphemeralNode), retries
// operations across connection loss, and re-arms watches (the Watch* methods). BrokerRegistry
// keeps a broker's nodes; the consumer-side methods (RegisterConsumer, WatchConsumers,
// WatchPartitions, ClaimPartition, CommitOffset, …) serve the Go client. docs/zookeeper.md
// describes the behaviour; package zktest gives tests a real ZooKeeper.
package zkmeta
