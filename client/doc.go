// Package client is the Go client of metaq: a Producer, a Consumer (consumer
// groups, clustering or broadcast) and an Admin toolbox, speaking MetaQ's text
// protocol to the brokers and finding them — and keeping group state — in
// ZooKeeper, exactly as MetaQ's own clients do (docs/zookeeper.md, docs/client.md).
//
//	p, _ := client.NewProducer(client.Config{ZKConnect: "127.0.0.1:2181"})
//	res, err := p.Send(ctx, &client.Message{Topic: "orders", Body: b, Tag: "paid", Keys: []string{"o-42"}})
//	c, _ := client.NewConsumer(client.Config{ZKConnect: "127.0.0.1:2181"}, "billing")
//	c.Subscribe("orders", "paid||refunded", func(ctx context.Context, m *client.Message) error { … })
//	c.Start(ctx)
//
// docs/client.md is the guide: options, ordering, at-least-once delivery,
// offsets, broadcast, start positions, retries and failover.
package client
