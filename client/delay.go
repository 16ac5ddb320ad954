package client

// Property keys of delayed, retried and dead-lettered messages
// (docs/delay.md). On a received message they are in Message.Properties,
// except deliverAt (Message.DeliverAt).
const (
	propDeliverAt = "deliverAt"
	// PropOrigMsgID is the id the producer got for the message (for a
	// retried or dead-lettered message: its first delivery's id).
	PropOrigMsgID = "origMsgId"
	// PropRetryTopic is the topic a retried or dead-lettered message was
	// first consumed from.
	PropRetryTopic = "retryTopic"
	// PropReason is why a consumer gave a message back (DLQ).
	PropReason = "reason"
)
