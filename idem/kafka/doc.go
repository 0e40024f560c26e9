// Package kafka connects idem handlers to Kafka (through
// github.com/twmb/franz-go): a [Consumer] in a consumer group that feeds each
// record to an [idem.Handler] (a generated wrapper, an [idemimpl.Inbox]) and
// commits its offset only after the handler's transaction committed, and a
// [Publisher] that an [relay.Relay] produces the outbox through, with an
// idempotent producer and acks.
//
// # What the consumer does with each record
//
// The value is decoded (JSON by default, consumer.WithDecoder for another format)
// into the handler's message type. An [idem.Message] gets as its ID the
// header idem-message-id ([HeaderMessageID], which the [Publisher] sets to
// the outbox's stable id) or, without that header, the record key; the
// attempt and the headers (as text) too. The offset is never the ID. Then
// [idem.ActionFor] of the handler's error decides, and nothing else:
//
//   - Ack: the record is done; its offset is committed (below).
//   - Retry: its offset is not committed; the partition is sought back to the
//     record (SetOffsets) and paused for [WithRetryDelay] (default 5s), then
//     fetched again: a delay, never a hot loop, and the records after it in
//     the partition wait their turn (a key in progress waits [idem.RetryAfter]
//     instead, not counted, for consumer.WithMaxWait at most). After
//     consumer.WithMaxAttempts attempts
//     (default 10) the record is dead-lettered instead.
//   - DeadLetter: a copy is produced (and acknowledged) to the dead-letter
//     topic, by default the topic + ".dlq" ([WithDeadLetterTopic]), with the
//     headers idem-reason (the error), idem-attempt, idem-topic,
//     idem-partition and idem-offset; then the record is done. An undecodable
//     value ([idem.ErrUndecodablePayload]), a value larger than
//     consumer.WithMaxBodySize (default 4 MiB), a record without the id its key
//     needs ([idem.ErrInvalidKey]) and a reused key ([idem.ErrKeyReused]) end
//     here, once. If the copy cannot be produced the record is retried.
//
// The attempt is the header idem-attempt (1 without it) plus the failed
// attempts at this record in this process: a count kept in memory, which
// starts again after a restart or after another member took the partition
// over. Every log line about a record carries group, topic, partition,
// offset, message_id and attempt.
//
// # Offsets, rebalances and stopping
//
// Auto-commit is off. [Consumer.Run] polls up to [WithMaxPollRecords] records
// (default 500), processes the partitions of a poll at once (at most
// consumer.WithWorkers, default 4) and the records of each partition in order (one at
// a time, or in batches: below), stopping at a record to retry. When all are
// done it commits, per partition, the offset after the last record done
// (CommitRecords, synchronous): only records whose transactions committed,
// contiguous from the previous commit. The client is created with
// BlockRebalanceOnPoll: a rebalance waits until the poll was processed and
// committed (AllowRebalance), so partitions never move with work in flight. A
// record whose transaction committed but whose offset commit was lost (a
// crash, a failed commit) comes again and is a Duplicate.
//
// When the handler is also an [idem.BatchHandler] (every generated tx-mode
// wrapper, every [idemimpl.Inbox]), the records of one poll for a partition go, in
// offset order, to DeliverBatch calls of at most the batch's max (consumer.WithBatch;
// default [idem.DefaultBatchCap], 100, never more than [WithMaxPollRecords];
// there is no linger: a poll is the batch), one transaction per batch (see
// [idemimpl.Inbox.HandleBatch]). Then each record, in order, is done or retried by
// its own result (idem.ActionFor of its Result.Err); a record that does not
// decode is dead-lettered on its own and takes no part in the batch. If record
// k must be retried, the offsets up to k-1 are committed and the partition is
// sought back to k: the records after k in its batch come again, and those
// whose transactions committed are Duplicates then. consumer.WithBatch(1, 0) turns
// batching off; a handler that is only an [idem.Handler] gets one Deliver per
// record.
//
// When its context ends, Run lets the handlers in flight end (their
// transactions roll back when they see the context), commits the offsets of
// what committed, and closes the client, which leaves the group; nothing it
// did not commit in the database is committed. franz-go reconnects to the
// brokers by itself.
//
// # Topology
//
// The consumer and the publisher create no topics and expect these to exist:
// the consumed topics, their dead-letter topics (topic + ".dlq", or
// [WithDeadLetterTopic]) and the topics the relay produces to (the outbox
// rows' destinations). There is no retry topic: a retry seeks the partition
// back. Declaring them is opt-in: [Declare] creates (with franz-go's kadm)
// every topic of a [Topology] — its Topics, their dead-letter topics
// (Topology.DeadLetterTopic, the same mapping as WithDeadLetterTopic) and its
// Destinations — with its Partitions, ReplicationFactor (0: the cluster's
// defaults) and Configs; a topic that exists already is left as it is. Or
// create them with your own tooling, or let the cluster create topics on
// first use.
//
// # Publisher
//
// [Publisher] implements [idem.Publisher]: each outbox row becomes a record
// on the topic named by its destination, keyed by its ordering key, or by its
// stable id when it has none, with its headers plus idem-message-id = the
// stable id. All messages of a batch are in flight at once through franz-go's
// idempotent producer (acks from all in-sync replicas); Publish returns one
// error per message, in order: nil once the brokers acknowledged it.
// [WithClientOptions] passes franz-go options (TLS, SASL, timeouts) to the
// consumer's and the publisher's clients.
package kafka
