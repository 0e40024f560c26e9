// Package jetstream connects idem handlers to NATS JetStream (through
// github.com/nats-io/nats.go/jetstream; NATS server 2.9 or later): a
// [Consumer] that pulls from a durable consumer, feeds each message to an
// [idem.Handler] (a generated wrapper, an [idemimpl.Inbox]) and acknowledges it
// only after its transaction committed, and a [Publisher] that an
// [relay.Relay] publishes the outbox through, each message with its PubAck.
//
// # What the consumer does with each message
//
// The data is decoded (JSON by default, consumer.WithDecoder for another format)
// into the handler's message type; an [idem.Message] gets the Nats-Msg-Id
// header as its ID, NumDelivered (less the waits for a key in progress) as
// its Attempt and the headers too. For every message it holds (being
// handled, collected for a batch, or pulled and waiting for a worker) the
// consumer sends InProgress at a third of the durable consumer's ack wait,
// so that neither a handler longer than the ack wait nor a message waiting
// its turn is delivered twice. Then [idem.ActionFor] of the handler's error decides, and nothing
// else:
//
//   - Ack: DoubleAck (the server confirms the ack), after the commit. A
//     message whose ack is lost (the connection gone between the commit and
//     the ack) is delivered again after the ack wait and is a Duplicate.
//   - Retry: NakWithDelay, the delay [WithRetryDelay] (1s after the first
//     attempt, doubled after each further one, at most 1m): never a hot
//     redelivery loop (a key in progress waits [idem.RetryAfter] instead, not
//     counted, for consumer.WithMaxWait at most). After
//     consumer.WithMaxAttempts attempts (default 10) the
//     message is dead-lettered instead.
//   - DeadLetter: a copy is published to the dead-letter subject (with its
//     PubAck), with the reason in the header Idem-Reason and the original
//     Nats-Msg-Id, stream, subject, stream sequence and attempt in
//     Idem-Msg-Id, Idem-Stream, Idem-Subject, Idem-Stream-Seq and
//     Idem-Attempt; then the message is terminated (Term), so the server
//     never delivers it again. An undecodable body
//     ([idem.ErrUndecodablePayload]), data larger than consumer.WithMaxBodySize
//     (default 1 MiB), a message without the Nats-Msg-Id its key needs
//     ([idem.ErrInvalidKey]) and a reused key ([idem.ErrKeyReused]) end
//     here, once. The copy's own Nats-Msg-Id is "<stream>:<sequence>", so a
//     second copy of the same stored message is dropped by the dead-letter
//     stream's deduplication.
//
// If the copy cannot be published (no stream captures the dead-letter
// subject) the message is not terminated: it is nak'ed with the retry delay
// and the error is logged. Every log line about a message carries stream,
// consumer, subject, stream_seq, message_id and attempt (NumDelivered).
//
// [Consumer.Run] runs consumer.WithWorkers handlers at once (default 4) and
// holds at most [WithPrefetch] messages (default twice the workers): it
// pulls no more than it has room for. The connection's own reconnect (give
// it nats.MaxReconnects(-1)) is enough: the consumer pulls again after every
// reconnect. A pull that fails otherwise (the stream
// or the consumer deleted) is started again with backoff ([WithBackoff]).
// When its context ends the consumer takes no new message, settles what the
// handlers finish (a commit is acked), and naks the messages it held and had
// not started, so they are delivered again at once; it acks nothing it did not commit.
// A pull in flight then is received to its end first: on a drained stream,
// until its 5 s expiry. The server would deliver the naked messages to that
// pull again, and nobody reads it any more.
//
// # Batches
//
// When the handler is also an [idem.BatchHandler] (every generated tx-mode
// wrapper, every [idemimpl.Inbox]), a worker takes a message, then what the pull
// has buffered and what arrives within the linger of the first, up to the
// batch's max, and hands the decoded messages to one DeliverBatch call (one
// transaction for the batch, see [idemimpl.Inbox.HandleBatch]). Each message is
// then acked (DoubleAck), nak'ed with the retry delay, or terminated and
// copied to the dead-letter subject, by its own result (idem.ActionFor of its
// Result.Err); a message that does not decode is dead-lettered on its own and
// takes no part in the batch. InProgress goes out for every message of the
// batch until it is settled, so a batch longer than the ack wait keeps all its
// messages. consumer.WithBatch sets the max (default [idem.DefaultBatchCap], 100,
// never more than the prefetch) and the linger (default consumer.DefaultBatchLinger,
// 2ms); consumer.WithBatch(1, 0) turns batching off. A handler that is only an
// [idem.Handler] gets one Deliver per message.
//
// # Topology
//
// The consumer expects, for a [Topology]:
//
//   - the work stream Stream;
//   - the durable pull consumer Consumer on it, with AckExplicit;
//   - a stream that captures the dead-letter subject (default
//     "idem.dlq.<Stream>"), for the dead-letter copies.
//
// [Declare] creates or updates all three (opt-in: call it at startup, or
// declare the same with your own tooling): the work stream with Subjects and
// DuplicateWindow, the dead-letter stream DeadLetterStream (default
// "<Stream>_DLQ") on the dead-letter subject, and the durable consumer with
// explicit ack, AckWait (default 30s) and no MaxDeliver (the consumer
// dead-letters after WithMaxAttempts itself, with a copy; a MaxDeliver would
// drop the message silently). The consumer and the publisher declare nothing.
//
// # Publisher
//
// [Publisher] implements [idem.Publisher]: each outbox row is published with
// PublishMsgAsync to its destination (the subject), with the row's stable id
// as Nats-Msg-Id and its headers as NATS headers; up to [WithMaxInFlight]
// messages (default 1024) are in flight at once, and Publish returns one
// error per message, in order: nil once the stream's PubAck came back. A
// relay's second try of a row is dropped by the stream's deduplication
// window and still acknowledged; after the window the next consumer's inbox
// makes it a Duplicate. A subject that no stream captures fails that message
// alone. The publisher expects the streams it publishes to to exist.
package jetstream
