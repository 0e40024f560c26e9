// Package rabbitmq connects idem handlers to RabbitMQ (AMQP 0-9-1, through
// github.com/rabbitmq/amqp091-go): a [Consumer] that feeds a queue's
// deliveries to an [idem.Handler] (a generated wrapper, an [idemimpl.Inbox]) and
// acknowledges each only after its transaction committed, and a [Publisher]
// that an [relay.Relay] publishes the outbox through, with publisher confirms.
//
// # What the consumer does with each delivery
//
// The body is decoded (JSON by default, consumer.WithDecoder for another format)
// into the handler's message type; an [idem.Message] gets the AMQP message_id
// as its ID, the attempt and the headers too. Then [idem.ActionFor] of the
// handler's error decides, and nothing else:
//
//   - Ack: basic.ack, after the commit. A delivery whose outcome is unknown
//     (the connection lost between the commit and the ack) comes back and is
//     a Duplicate.
//   - Retry: a copy goes to the queue's retry queue (published with
//     confirms, then the original is acked). The retry queue holds it for
//     the retry delay (its x-message-ttl) and dead-letters it back to the
//     work queue: a delay, never a hot requeue loop. After consumer.WithMaxAttempts
//     attempts (default 10) the message is dead-lettered instead. A key in
//     progress ([idem.ErrInProgress], [idem.ErrClaimLost]) is a wait, not an
//     attempt: its copy carries [HeaderNotBefore] ([idem.RetryAfter] from
//     now) and goes round the retry queue until then, for consumer.WithMaxWait
//     at most.
//   - DeadLetter: a copy goes to the queue's dead-letter exchange, which
//     routes it to the dead-letter queue, with the reason in the header
//     x-idem-reason; then the original is acked. An undecodable body
//     ([idem.ErrUndecodablePayload]), a body larger than consumer.WithMaxBodySize
//     (default 4 MiB), a message without the id its key needs
//     ([idem.ErrInvalidKey]) and a reused key ([idem.ErrKeyReused]) end here,
//     once, without reaching the handler more than once.
//
// If the copy cannot be routed (the retry queue or the dead-letter exchange
// is missing or has no queue bound) the original is not acked: the consumer
// closes its channel, which returns the delivery to the queue, and connects
// again after a backoff, logging what is missing.
//
// The attempt is 1 on the first delivery: the header x-idem-attempt that the
// consumer sets on a retry copy (or, without it, 1 plus the x-death count of
// expiries), plus the redeliveries of this copy (a quorum queue's
// x-delivery-count, or 1 when a classic queue marks the delivery
// redelivered). Every log line about a delivery carries queue, message_id and
// attempt.
//
// [Consumer.Run] runs consumer.WithWorkers handlers at once (default 4) over a
// prefetch of [WithPrefetch] deliveries (default twice the workers). It
// connects again with exponential backoff whenever the connection or channel
// is lost; deliveries that were not acked come back from the broker. When its
// context ends it takes no new delivery, acks what committed, and closes the
// channel, which returns every delivery it did not ack to the queue.
//
// # Batches
//
// When the handler is also an [idem.BatchHandler] (every generated tx-mode
// wrapper, every [idemimpl.Inbox]), a worker takes a delivery, then what the
// channel already holds and what arrives within the linger of the first, up to
// the batch's max, and hands the decoded messages to one DeliverBatch call
// (one transaction for the batch, see [idemimpl.Inbox.HandleBatch]). Each delivery
// is then acked, retried or dead-lettered by its own result (idem.ActionFor of
// its Result.Err), one basic.ack per delivery tag, as above; a delivery that
// does not decode is dead-lettered on its own and takes no part in the batch.
// consumer.WithBatch sets the max (default [idem.DefaultBatchCap], 100, never more
// than the prefetch, which bounds the unacked deliveries) and the linger
// (default consumer.DefaultBatchLinger, 2ms); consumer.WithBatch(1, 0) turns batching off. A
// handler that is only an [idem.Handler] gets one Deliver per delivery.
//
// # Topology
//
// For a work queue Q the consumer expects:
//
//   - the queue Q;
//   - the retry queue Q.retry, with x-message-ttl (the retry delay),
//     x-dead-letter-exchange "" and x-dead-letter-routing-key Q;
//   - the dead-letter exchange Q.dlx (direct) and the dead-letter queue
//     Q.dlq bound to it with the routing key Q.
//
// It checks that Q.retry and Q.dlx exist each time it connects. [Declare]
// declares all of them (opt-in: call it at startup, or declare the same
// topology with your own tooling): durable, classic or quorum queues
// ([Topology].Quorum), Q with x-dead-letter-exchange Q.dlx so that what the
// broker itself dead-letters (a quorum queue's delivery limit, a reject by
// another tool) lands in Q.dlq too, and, when [Topology].Exchange is set, that
// exchange and Q's bindings to it. The consumer and the publisher declare
// nothing themselves.
//
// # Publisher
//
// [Publisher] implements [idem.Publisher]: each outbox row is published
// persistent, mandatory, with the row's stable id as message_id and its
// headers as AMQP headers, on a channel in confirm mode; all messages of a
// batch are in flight at once, and Publish returns one error per message, in
// order: nil once the broker confirmed it. A message that is unroutable
// (returned) or nacked, or whose exchange does not exist, fails alone. The
// destination "exchange/routing-key" publishes to that exchange; a
// destination without "/" is a routing key on the default exchange, that is
// a queue name ([WithRoute] changes the mapping). The publisher expects the
// exchanges it publishes to to exist. After a lost connection the next
// Publish connects again; the relay retries what was not confirmed.
package rabbitmq
